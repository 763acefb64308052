// What the agent sends the guard server (ddp-guard --serve-fd, guard_server.hpp)
// to start one guard: a frame of a native-endian uint32 length and that many
// bytes of NUL-terminated fields, with the guard's file descriptors attached
// (SCM_RIGHTS, guard_protocol.hpp). Encoded in the agent, decoded in the
// server; both sides are built from this one file.
//
// Thread-safety: free functions on caller-owned data.
#pragma once

#include <sched.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "worker_session.hpp"

namespace ddp::guard {

struct GuardRequest {
  std::chrono::milliseconds stop_timeout{30000};
  std::string fence_file;  // empty: none
  std::string cwd;
  std::optional<cpu_set_t> cpus;  // the guard's (and so the worker's) CPU affinity
  std::vector<std::string> argv;  // the worker's; argv[0] is an absolute path
  std::vector<std::string> env;   // the worker's whole environment, "KEY=VALUE"
  int session = kSessionShared;   // worker_session.hpp: its group, its session, its terminal
};

// A frame's payload is at most this long (what exec takes at most for
// arguments and environment together, with room to spare).
inline constexpr std::uint32_t kMaxRequestBytes = 8U << 20;

// The payload (without the length in front).
std::string encode_request(const GuardRequest& r);

// The request in `payload`, or nullopt (with `why`) for a malformed one.
std::optional<GuardRequest> decode_request(const std::string& payload, std::string* why);

}  // namespace ddp::guard
