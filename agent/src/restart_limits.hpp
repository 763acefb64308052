// The limits on full restarts beside --max_restarts: --max_no_progress_restarts
// (attempts in a row that ended without progress; docs/agent-recovery.md, "No progress,
// no requeue") and --max_node_failures within --node_failure_window (this
// node's own failures; "Bad nodes kept out"). Bookkeeping only: each returns
// the line to act on once its limit is reached, and the agent decides.
//
// Thread-safety: the io thread only.
#pragma once

#include <chrono>
#include <deque>
#include <string>

#include "ddp/agent/agent_config.hpp"

namespace spdlog {
class logger;
}

namespace ddp::agent {

class RestartLimits {
 public:
  explicit RestartLimits(const AgentConfig& cfg) : cfg_(cfg) {}

  // Counts a failed attempt against --max_no_progress_restarts (`progressed`:
  // a heartbeat or a completed section came); returns the line to stop the
  // job with when the limit is reached, else "" (with a warning on `log`
  // when the attempt counted).
  std::string judge_progress(bool progressed, spdlog::logger& log);
  // Counts a local failure at `now` against --max_node_failures; returns why
  // this node is to be excluded once the limit is reached, else "".
  std::string count_node_failure(std::chrono::steady_clock::time_point now);

 private:
  const AgentConfig& cfg_;
  int no_progress_ = 0;  // restarts in a row after attempts without progress
  std::deque<std::chrono::steady_clock::time_point> node_failures_;  // within --node_failure_window
};

}  // namespace ddp::agent
