// Starts one child process from the agent, which has many threads: a fork
// that shares the agent's memory until the exec (clone with CLONE_VM, as
// posix_spawn does, without copying the agent's address space), a few
// async-signal-safe calls, exec. Nothing between fork and exec takes a
// lock, allocates, or touches an io_context: a lock another thread held at the
// moment of the fork stays held forever in the child (Boost.Process's
// launchers call io_context::notify_fork there, which does exactly that).
//
// The caller waits for the exec with a deadline, so a child that never gets
// there is killed and reported, never waited on forever; the wait also ends
// early when the caller cancels it.
//
// Thread-safety: fork_exec() may run on any thread; the death signal of the
// child follows that thread (PR_SET_PDEATHSIG), so call it from one that lives
// as long as the children.
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "worker_session.hpp"

namespace ddp::agent {

// A program to start and what it is given: the one description shared by
// fork_exec (ExecSpec) and the process runner (SpawnSpec).
struct Program {
  std::string executable;         // absolute path; also the child's argv[0]
  std::vector<std::string> args;  // argv[1..]
  std::vector<std::string> env;   // the complete environment, "KEY=VALUE"
};

struct ExecSpec : Program {
  // The child's stdin, stdout and stderr; -1 leaves that one as the agent's.
  int in = -1;
  int out = -1;
  int err = -1;
  int keep_fd = -1;                 // one more fd that survives exec (the guard's info pipe)
  const cpu_set_t* cpus = nullptr;  // CPU affinity, inherited by what the child forks
  pid_t agent_pid = -1;             // the child exits at once if its parent is not this
  // guard::kSessionShared (worker_session.hpp): a process group of its own in
  // the agent's session; kSessionOwn: a session of its own; 0-2: a session
  // of its own whose controlling terminal is that stdio fd.
  int session = guard::kSessionShared;
  // Tests only: the child stops itself just before exec, as one stuck before
  // exec would look to the parent.
  bool stop_before_exec = false;
};

struct ForkExecResult {
  pid_t pid = -1;     // > 0: the child exec'd; it is the caller's to reap
  std::string error;  // pid <= 0: why (the child, if any, is killed and reaped)
  bool cancelled = false;
};

// What ends a wait for the exec early: `fd` (a non-blocking eventfd) turns
// readable; fork_exec drains it and asks `is_cancelled()` whether this spawn
// is one of those cancelled.
struct ExecCancel {
  int fd = -1;
  std::function<bool()> is_cancelled;
};

// Forks and execs `spec` as its own process group leader (and session leader,
// as spec.session says) with SIGKILL as its
// parent-death signal, default signal dispositions and mask, only fds 0-2
// (and keep_fd) open. Waits at most `timeout` for the exec.
ForkExecResult fork_exec(const ExecSpec& spec, std::chrono::milliseconds timeout, const ExecCancel& cancel);

// Reaps `pid` without blocking the caller's thread for long: a child that has
// been SIGKILLed but is not gone yet (uninterruptible sleep) is left to a
// detached thread.
void reap_killed(pid_t pid);

}  // namespace ddp::agent
