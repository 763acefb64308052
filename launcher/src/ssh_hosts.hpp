// The ssh processes of a --hosts job (ssh_launch.cpp): each host's ssh and
// the threads relaying its output, their stop on a signal or after a
// failure, and the wait whose first failure decides the job's outcome.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ddp/common/exit_code.hpp"
#include "hostfile.hpp"

namespace ddp::launcher {

// ssh's exit status for its own failures (connection refused or lost, bad
// host key; ssh(1)); the forked child uses it too when it cannot exec ssh.
inline constexpr int kSshFailed = 255;

struct Host {
  RemoteHost spec;
  pid_t pid = -1;
  std::thread out_reader;  // ssh's stdout: the remote terminal
  std::thread err_reader;  // ssh's stderr: ssh's own messages
  // Written by out_reader, read once it is joined: the remote ddprun's
  // failure cause, and its last "ddprun: error: " line.
  std::string failure;
  std::string error;
};

// SIGINT/SIGTERM/SIGHUP/SIGQUIT are taken by a thread (HostStopper); children
// get the old mask, returned, back.
sigset_t block_stop_signals(sigset_t* old_mask);

// Stops every host's ssh (SIGTERM): on a stop signal, taken by a thread of
// its own, at once when asked, or at a time set when a host's workers failed.
class HostStopper {
 public:
  HostStopper(std::vector<Host>& hosts, const sigset_t& stop_set)
      : hosts_(hosts), stop_set_(stop_set), thread_([this] { run(); }) {}
  ~HostStopper() { finish(); }

  void stop_all();
  void stop_in(std::chrono::steady_clock::duration grace) {
    stop_at_ = (std::chrono::steady_clock::now() + grace).time_since_epoch().count();
  }
  // `h`'s ssh was reaped: its pid may be reused from now on.
  void reaped(Host& h) {
    std::lock_guard lock(pid_mu_);
    h.pid = -1;
  }
  int signal() const { return stop_signal_; }
  void finish() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run();

  std::vector<Host>& hosts_;
  sigset_t stop_set_;
  std::mutex pid_mu_;  // Host::pid: cleared when reaped, read by the signal thread
  std::atomic<int> stop_signal_{0};
  std::atomic<bool> done_{false};
  // When the hosts are stopped unless they ended before (steady_clock ticks; 0: none).
  std::atomic<std::chrono::steady_clock::rep> stop_at_{0};
  std::thread thread_;
};

// The job's outcome: its exit code and the host that decided it.
struct Outcome {
  int code = exit_code(ExitCode::kOk);
  const Host* first_failed = nullptr;
  int first_rc = 0;
  int first_signal = 0;
};

// Reaps every host's ssh; the first to fail decides the outcome and stops the others.
Outcome wait_for_hosts(std::vector<Host>& hosts, HostStopper& stopper, double stop_timeout_s);

}  // namespace ddp::launcher
