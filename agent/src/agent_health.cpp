// Health checks before each rendezvous (docs/agent.md, "Health checks"). An
// unhealthy node does not join: it says why (log, --event_log, its status
// record), waits, checks again with backoff, and after --health_retries
// failed retries exits 5 without closing the rendezvous, so the other nodes
// go on without it and a scheduler can requeue the job elsewhere.
#include <algorithm>
#include <cstdio>

#include "agent_impl.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::agent {

namespace {

// The backoff stops doubling here: a node that recovers (a remount, a
// driver reset) should not wait much longer than that to rejoin.
constexpr std::chrono::milliseconds kMaxHealthRetryInterval{std::chrono::seconds(60)};

std::string seconds_text(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

}  // namespace

void Agent::Impl::check_health_then_join() {
  if (!health) health = std::make_shared<HealthCheck>(cfg);
  rdzv->check_health(health, [this](const HealthVerdict& v) { on_health(v); });
}

void Agent::Impl::on_health(const HealthVerdict& v) {
  if (!life.is(Phase::kRendezvous)) return;  // a signal ended the run meanwhile
  if (!v.note.empty()) log->info("{}", v.note);
  if (v.healthy()) {
    if (health_failures > 0) {
      log->info("node healthy again after {} failed health check(s): joining", health_failures);
      observers.emit("healthy", {{"failures", health_failures}});
    }
    health_failures = 0;
    join_rendezvous();
    return;
  }
  ++health_failures;
  const int retries = cfg.health.max_retries;
  if (health_failures > retries) {
    const std::string msg = "node unhealthy (" + v.check + " check): " + v.reason + "; gave up after " +
                            std::to_string(health_failures) +
                            " failed health checks (--health_retries=" + std::to_string(retries) + ")";
    observers.emit(
        "unhealthy",
        {{"check", v.check}, {"reason", v.reason}, {"failures", health_failures}, {"retry_in_s", nullptr}});
    finish(ExitCode::kUnhealthy, msg);
    // After finish()'s final record: the node's last word is why it left.
    observers.publish_unhealthy(v.reason, health_failures);
    return;
  }
  auto delay = cfg.health.retry_interval;
  for (int i = 1; i < health_failures && delay < kMaxHealthRetryInterval; ++i) delay *= 2;
  delay = std::min(delay, std::max(kMaxHealthRetryInterval, cfg.health.retry_interval));
  log->warn("node unhealthy, not joining ({} check): {}; checking again in {} ({}/{})", v.check, v.reason,
            seconds_text(delay), health_failures, retries);
  observers.emit("unhealthy", {{"check", v.check},
                               {"reason", v.reason},
                               {"failures", health_failures},
                               {"retry_in_s", static_cast<double>(delay.count()) / 1000.0}});
  observers.publish_unhealthy(v.reason, health_failures);
  health_timer.expires_after(delay);
  health_timer.async_wait([this](boost::system::error_code ec) {
    if (!ec && life.is(Phase::kRendezvous)) check_health_then_join();
  });
}

}  // namespace ddp::agent
