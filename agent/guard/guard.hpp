// ddp-guard: one per worker, between the agent and the worker. A child
// subreaper, so every process the worker starts stays in the guard's subtree
// whatever it does (setsid, double fork); the guard stops that subtree when
// the worker exits, when the agent asks, and when the agent dies.
//
// Single-threaded: signals are blocked and taken with sigtimedwait.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace ddp::guard {

struct GuardOptions {
  std::chrono::milliseconds stop_timeout{30000};  // SIGTERM → SIGKILL grace for leftovers
  // After SIGKILL, how long to wait for processes to vanish. Only a process in
  // uninterruptible sleep (D) outlives it; it is then reported and left.
  std::chrono::milliseconds kill_wait{5000};
  int info_fd = -1;
  pid_t agent_pid = 0;
  std::vector<std::string> argv;  // the worker's; argv[0] is an absolute path
  pid_t adopt_pid = 0;            // > 0: the worker is this child, already running (argv empty)
  std::string fence_file;         // the fence backstop's deadline (guard_protocol.hpp), or none
  // False in a guard forked by the guard server, which looks for stale
  // cgroups beside the guards' (stale_cgroups.hpp) once per spawn, not once
  // per guard.
  bool reap_stale_siblings = true;
};

// The signals a guard takes with sigtimedwait, blocked for its whole life:
// all but SIGKILL, SIGSTOP, the job-control stops and SIGCONT, and the
// synchronous faults. The guard server blocks the same (guard_server.hpp).
sigset_t taken_signals();

// Runs the worker and returns only by exiting the process: with the worker's
// exit code, or by the worker's terminating signal.
[[noreturn]] void run_guard(const GuardOptions& options);

}  // namespace ddp::guard
