// The health checks before each rendezvous, with their retries (docs/agent-recovery.md,
// "Health checks"): runs the checks (on the rendezvous thread), counts the
// failed ones in a row, and waits out the backoff before the next. It reports
// each verdict; the agent decides (join, retry, or give up with exit 5:
// agent_health.cpp).
//
// Thread-safety: the io thread only; the HealthCheck is shared with the
// rendezvous thread, which may outlive the agent (abandon).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>

#include "ddp/agent/agent_config.hpp"
#include "health_check.hpp"
#include "rendezvous_calls.hpp"

namespace ddp::agent {

class HealthGate {
 public:
  HealthGate(boost::asio::io_context& io, const AgentConfig& cfg) : cfg_(cfg), timer_(io) {}

  // Runs the checks; `done` gets the verdict on the io thread.
  void check(RendezvousCalls& rdzv, std::function<void(const HealthVerdict&)> done);
  // Counts a verdict: the failed checks in a row, 0 once healthy.
  int count(const HealthVerdict& v) { return failures_ = v.healthy() ? 0 : failures_ + 1; }
  int failures() const { return failures_; }
  // The wait before the next check: --health_retry_interval, doubled per
  // failure in a row, capped.
  std::chrono::milliseconds backoff() const;
  // `then` after `delay`, unless the agent ends first.
  void retry_after(std::chrono::milliseconds delay, std::function<void()> then);
  // A --health_check command still running is stopped.
  void cancel();

 private:
  const AgentConfig& cfg_;
  std::shared_ptr<HealthCheck> check_;
  boost::asio::steady_timer timer_;
  int failures_ = 0;
};

}  // namespace ddp::agent
