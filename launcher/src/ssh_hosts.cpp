#include "ssh_hosts.hpp"

#include <sys/wait.h>

#include <cerrno>

#include "ddp/common/logging.hpp"

namespace ddp::launcher {
namespace {

// After one host's workers failed, how long the others get, beyond
// --stop_timeout, to close the rendezvous and send their last lines (the failed
// host's report among them) before their ssh is stopped: they got the failure
// through the store and end on their own, and a stopped ssh loses what is
// still in flight.
constexpr std::chrono::seconds kEndOnTheirOwn{5};

}  // namespace

sigset_t block_stop_signals(sigset_t* old_mask) {
  sigset_t stop_set;
  sigemptyset(&stop_set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&stop_set, s);
  pthread_sigmask(SIG_BLOCK, &stop_set, old_mask);
  // An ignored signal is discarded, not queued for sigwait: a shell starts
  // background jobs with SIGINT ignored, and `kill -INT` must still stop the job.
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) ::signal(s, SIG_DFL);
  return stop_set;
}

void HostStopper::stop_all() {
  std::lock_guard lock(pid_mu_);
  for (auto& h : hosts_) {
    if (h.pid > 0) ::kill(h.pid, SIGTERM);
  }
}

void HostStopper::run() {
  const timespec tick{0, 100'000'000};
  while (!done_) {
    const int s = sigtimedwait(&stop_set_, nullptr, &tick);
    if (s > 0 && stop_signal_.exchange(s) == 0) stop_all();
    const auto at = stop_at_.load();
    if (at != 0 && std::chrono::steady_clock::now().time_since_epoch().count() >= at) {
      stop_at_ = 0;
      stop_all();
    }
  }
}

Outcome wait_for_hosts(std::vector<Host>& hosts, HostStopper& stopper, double stop_timeout_s) {
  auto log = log::get("ddprun");
  Outcome out;
  // A host that ended with a rendezvous error while others run is often the
  // echo of a failure elsewhere ("rendezvous ... is closed: workers failed"):
  // a host whose workers failed, ending after it, names the job's outcome.
  bool echo_only = false;
  std::size_t running = hosts.size();
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (auto& h : hosts) {
      if (h.pid != pid) continue;
      stopper.reaped(h);
      --running;
      const bool killed = WIFSIGNALED(status);
      const int rc = killed ? signal_exit_code(WTERMSIG(status)) : WEXITSTATUS(status);
      const bool first =
          out.code == exit_code(ExitCode::kOk) || (echo_only && rc == exit_code(ExitCode::kFailed));
      if (rc == exit_code(ExitCode::kOk) || !first || stopper.signal() != 0) continue;
      // ssh's own failures exit 255, and a killed ssh closed its connection:
      // the host is lost to this job (requeue-able, like a lost node).
      const bool lost = killed || rc == kSshFailed;
      out = {lost ? exit_code(ExitCode::kRendezvous) : rc, &h, rc, killed ? WTERMSIG(status) : 0};
      echo_only = !lost && rc == exit_code(ExitCode::kRendezvous) && running > 0;
      // The error line waits for every host's last lines, so that it is ours
      // last; the others end on their own first, within a grace.
      if (rc == exit_code(ExitCode::kFailed) || echo_only) {
        const auto grace = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(stop_timeout_s) + kEndOnTheirOwn);
        stopper.stop_in(grace);
        if (running > 0) {
          log->info(
              "host {} ended with code {}: the other hosts stop their workers (stopped in {:.1f} s if not)",
              h.spec.name, rc, std::chrono::duration<double>(grace).count());
        }
      } else {
        if (running > 0) log->info("host {} ended with code {}: stopping the other hosts", h.spec.name, rc);
        stopper.stop_all();
      }
    }
  }
  return out;
}

}  // namespace ddp::launcher
