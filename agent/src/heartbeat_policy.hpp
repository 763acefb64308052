// What the agent makes of a worker's liveness file: the timeouts that apply
// (fixed, or learned after a warm-up), the next deadlines, and when the
// worker must tell it about a change. Pure logic, no I/O.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "ddp/agent/liveness_config.hpp"
#include "ddp/common/liveness_file.hpp"

namespace ddp::agent {

// The timeout of one section given its stats; nullopt: not timed (no
// timeout configured, or `auto` still warming up).
std::optional<std::chrono::milliseconds> section_timeout(const LivenessConfig& cfg,
                                                         const liveness::SectionStats& s);
// The heartbeat timeout given what the worker reported; nullopt: not timed
// (off, no heartbeat yet, or `auto` still warming up).
std::optional<std::chrono::milliseconds> heartbeat_timeout(const LivenessConfig& cfg,
                                                           const liveness::Snapshot& s);
// A learned timeout: factor x longest, never below cfg.auto_min.
std::chrono::milliseconds learned_timeout(const LivenessConfig& cfg, std::uint64_t longest_ns);

// CLOCK_MONOTONIC nanoseconds (the liveness file's clock, steady_clock's).
using MonoNs = std::uint64_t;
inline constexpr MonoNs kNever = UINT64_MAX;

struct LivenessPlan {
  MonoNs heartbeat_deadline = kNever;
  std::chrono::milliseconds heartbeat_timeout{0};
  bool heartbeat_learned = false;
  MonoNs section_deadline = kNever;
  std::chrono::milliseconds section_timeout{0};
  bool section_learned = false;
  std::string section;  // the current section's name
  std::uint64_t section_seq = 0;
  // What the worker is asked to notify (the liveness file's notify fields).
  bool notify_beat = false;
  MonoNs notify_enter_before = 0;
  // Slots whose entries matter (a timeout applies, or may once learned);
  // slots not claimed yet may be any name, so they matter too.
  std::uint32_t notify_slots = 0;
};

LivenessPlan plan_liveness(const LivenessConfig& cfg, const liveness::Snapshot& s);

}  // namespace ddp::agent
