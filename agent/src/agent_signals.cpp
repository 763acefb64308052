// Signals to the agent: forwarded to the workers, then a stop (a second
// Ctrl-C kills at once), or the workers' stacks on demand (kStackDumpSignal).
#include <signal.h>

#include "agent_impl.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::agent {

namespace {

// After a signal, how long closing the rendezvous may take before the agent
// exits anyway: a dead store must not keep a Ctrl-C'd agent alive.
constexpr std::chrono::milliseconds kCloseOnSignalTimeout{2000};

}  // namespace

void Agent::Impl::on_signal(int sig) {
  if (life.done()) return;
  if (sig == kStackDumpSignal) {
    if (group) group->dump_stacks();
    return;
  }
  if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP && sig != SIGQUIT) {
    // A notice for the workers (preemption), not a request to stop.
    log->info("received {}: forwarding to workers", signal_name(sig));
    group->signal_all(sig);
    return;
  }
  if (signal_received != 0) {
    // Only a second Ctrl-C is someone impatient at the terminal; a scheduler
    // or `timeout` may send SIGTERM twice, and the workers' SIGTERM handlers
    // (checkpoints) must get their full --stop_timeout.
    if (sig == SIGINT && signal_received == SIGINT) {
      log->warn("received SIGINT again: killing workers now");
      group->signal_all(SIGKILL);
    } else {
      log->info(
          "received {} again: workers are already stopping (SIGKILL after the stop "
          "timeout; Ctrl-C twice to kill at once)",
          signal_name(sig));
    }
    return;
  }
  signal_received = sig;
  // A spawn still waiting for the zygote's imports starts normally, to be stopped.
  if (zygote) zygote->stop_forking();
  switch (life.phase()) {
    case Phase::kRunning:
      log->info("received {}: forwarding to workers, then stopping them{}", signal_name(sig),
                sig == SIGINT ? " (Ctrl-C again to kill at once)" : "");
      begin_stop(StopReason::kSignal, sig);
      break;
    case Phase::kStopping:
      log->info("received {}: forwarding to workers{}", signal_name(sig),
                sig == SIGINT ? " (Ctrl-C again to kill at once)" : "");
      life.restop(StopReason::kSignal);
      group->stop_counting_failures();
      group->signal_all(sig);
      break;
    default:
      log->info("received {}: exiting", signal_name(sig));
      finish(signal_exit_code(sig));
      break;
  }
}

void Agent::Impl::close_after_signal() {
  life.enter(Phase::kClosing);
  const int code = signal_exit_code(signal_received);
  rdzv->close("agent on " + cfg.node.host + " stopped by " + signal_name(signal_received),
              [this, code] { finish(code); });
  poll_timer.expires_after(kCloseOnSignalTimeout);
  poll_timer.async_wait([this, code](boost::system::error_code ec) {
    if (!ec) finish(code);
  });
}

}  // namespace ddp::agent
