// The agent's side of the preload zygote's socket protocol (docs/agent-preload.md,
// "Preloading"; the zygote is agent/zygote/ddp_zygote.py): one connection per
// worker, a JSON request line sent with the worker's stdin, stdout and stderr
// (SCM_RIGHTS), a reply line naming the worker, and later its guard's exit.
//
// Thread-safety: free functions on caller-owned fds; the blocking ones run on
// the process runner's spawner thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ddp::agent {

struct ZygoteRequest {
  std::vector<std::string> argv;  // SCRIPT ARGS..., as sys.argv
  std::vector<std::string> env;   // the worker's whole environment, "KEY=VALUE"
  std::string cwd;
  std::string guard;  // ddp-guard, exec'd in the worker's parent
  std::chrono::milliseconds stop_timeout{30000};
  int session = -2;  // guard::kSessionShared etc. (worker_session.hpp)
};

struct ZygoteReply {
  pid_t worker_pid = -1;
  pid_t guard_pid = -1;  // leads the worker's process group
  std::string cgroup;    // the worker's cgroup v2, empty when none
  std::string error;     // set when the worker could not be started
  // With `error`: the zygote surely started nothing (it said so, or never got
  // the whole request), so the worker may be started normally instead. False
  // when it may have (no answer in time): a second start would run the rank twice.
  bool nothing_started = false;
};

// Connects to the zygote's socket; -1 (errno set) when nobody listens.
int connect_zygote(const std::string& socket_path);

// Sends the request with fds {in, out, err} on `conn` and waits at most
// `timeout` for the reply. `conn` stays open: the exit line comes on it.
ZygoteReply request_worker(int conn, const ZygoteRequest& request, int in, int out, int err,
                           std::chrono::milliseconds timeout);

// The wait status in an exit line ({"exit": N}); nullopt for anything else.
std::optional<int> parse_zygote_exit(const std::string& line);

// A pid in a JSON answer (the zygote's, the guard server's): a positive
// integer that fits pid_t, else -1.
pid_t pid_field(const nlohmann::json& reply, const char* key);

}  // namespace ddp::agent
