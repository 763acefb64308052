// Health checks before each rendezvous (docs/agent-recovery.md, "Health checks"). An
// unhealthy node does not join: it says why (log, --event_log, its status
// record), waits, checks again with backoff (HealthGate), and after
// --health_retries failed retries exits 5 without closing the rendezvous, so
// the other nodes go on without it and a scheduler can requeue the job elsewhere.
#include <cstdio>

#include "agent_impl.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::agent {

namespace {

std::string seconds_text(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

}  // namespace

void Agent::Impl::check_health_then_join() {
  health.check(*rdzv, [this](const HealthVerdict& v) { on_health(v); });
}

void Agent::Impl::on_health(const HealthVerdict& v) {
  if (!life.is(Phase::kRendezvous)) return;  // a signal ended the run meanwhile
  if (!v.note.empty()) log->info("{}", v.note);
  const int before = health.failures();
  const int failures = health.count(v);
  if (v.healthy()) {
    if (before > 0) {
      log->info("node healthy again after {} failed health check(s): joining", before);
      observers.emit("healthy", {{"failures", before}});
    }
    join_rendezvous();
    return;
  }
  const int retries = cfg.health.max_retries;
  if (failures > retries) {
    const std::string msg = "node unhealthy (" + v.check + " check): " + v.reason + "; gave up after " +
                            std::to_string(failures) +
                            " failed health checks (--health_retries=" + std::to_string(retries) + ")";
    observers.emit(
        "unhealthy",
        {{"check", v.check}, {"reason", v.reason}, {"failures", failures}, {"retry_in_s", nullptr}});
    finish(ExitCode::kUnhealthy, msg);
    // After finish()'s final record: the node's last word is why it left.
    observers.publish_unhealthy(v.reason, failures);
    return;
  }
  const auto delay = health.backoff();
  log->warn("node unhealthy, not joining ({} check): {}; checking again in {} ({}/{})", v.check, v.reason,
            seconds_text(delay), failures, retries);
  observers.emit("unhealthy", {{"check", v.check},
                               {"reason", v.reason},
                               {"failures", failures},
                               {"retry_in_s", static_cast<double>(delay.count()) / 1000.0}});
  observers.publish_unhealthy(v.reason, failures);
  health.retry_after(delay, [this] {
    if (life.is(Phase::kRendezvous)) check_health_then_join();
  });
}

}  // namespace ddp::agent
