// Spawns and watches worker processes. The only place that uses Boost.Process
// (to wait for a child's exit); the fork and exec are fork_exec.hpp's, which
// is safe in a process with threads.
//
// Every worker runs under its own ddp-guard (containment.hpp), which contains
// the worker's whole process tree; the pid reported is the worker's own. The
// guards are forked by one guard server per runner (guard_server_client.hpp),
// or exec'd one by one where it cannot run. The guard server (and any exec'd
// guard) is forked from one long-lived spawner thread, because
// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits: a
// short-lived thread would kill its workers with it. Each worker gets its own
// process group (so a stop reaches its children too), SIGKILL as parent-death
// signal (so `kill -9` of the agent leaves no orphan), exactly fds 0-2, and
// the environment it is given and nothing else. No spawn waits forever: a
// child gets kExecTimeout to exec, a guard kGuardReportTimeout to report.
//
// Thread-safety: construct, spawn(), cancel_spawns(), kill_unreported() and
// destroy on the io_context's thread;
// every callback runs on that thread.
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fork_exec.hpp"
#include "worker_stdio.hpp"

namespace ddp::agent {

// What to run (executable, args, env: fork_exec.hpp's Program) and how.
struct SpawnSpec : Program {
  // Grace between SIGTERM and SIGKILL for what a worker leaves running when it exits.
  std::chrono::milliseconds stop_timeout{30000};
  // --numa_binding: the CPUs the guard (and so the worker it forks) may run on.
  std::optional<cpu_set_t> cpu_affinity{};
  // A session of its own for the guard and the worker (worker_session.hpp),
  // with the pseudo-terminal WorkerStdio::terminal names as its controlling
  // terminal; false: a process group of its own in the agent's session.
  bool own_session = false;
};

// --preload: the worker is forked by the preload zygote instead of exec'd
// (its guard and containment are the same, docs/agent-preload.md "Preloading").
// `argv` is its sys.argv; `connect` runs on the spawner thread and returns a
// connection to a ready zygote, or -1 to spawn normally. No `connect`: spawn normally.
struct ZygoteSpawn {
  std::vector<std::string> argv;
  std::function<int()> connect;
};

struct ChildHandlers {
  // Raw bytes read from the worker's stdout or stderr.
  std::function<void(StdStream, std::string_view)> on_output;
  // The wait status, after both pipes reached EOF (or the drain timeout passed),
  // so no output line is reported after the exit.
  std::function<void(int wait_status)> on_exit;
};

// pid > 0 on success; pid 0 when cancel_spawns() cancelled the spawn before
// anything ran; otherwise (-1) `error` says why (exec failure, fork failure,
// a child that did not reach its exec in time and was killed).
using SpawnedFn = std::function<void(pid_t pid, const std::string& error)>;

class ProcessRunner {
 public:
  // `prestart_guard_server`: start the guard server (guard_server_client.hpp)
  // now, off the first spawn's path; otherwise at the first spawn.
  explicit ProcessRunner(boost::asio::io_context& io, bool prestart_guard_server = false);
  ~ProcessRunner();  // SIGKILLs the process groups of children still running
  ProcessRunner(const ProcessRunner&) = delete;
  ProcessRunner& operator=(const ProcessRunner&) = delete;

  // `stdio`: see worker_stdio.hpp; the default is pipes for stdout and stderr
  // and the agent's own stdin.
  void spawn(SpawnSpec spec, ChildHandlers handlers, SpawnedFn on_spawned, WorkerStdio stdio = {},
             ZygoteSpawn zygote = {});

  // Cancels every spawn asked for so far that has not started its worker:
  // queued ones never start, a child not yet exec'd is killed. Each is
  // answered with pid 0. A guard already exec'd goes on and reports its
  // worker, which the caller stops like any other (it may be running).
  void cancel_spawns();

  // Tells every guard that has not reported its worker yet to kill what it
  // started and exit: for when the stop's grace is over.
  void kill_unreported();

  // Sends `sig` to the process group of the worker `pid` (its guard leads it);
  // SIGKILL asks the guard to kill the worker's whole tree instead.
  void signal_group(pid_t pid, int sig);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared: posted callbacks hold weak references
};

}  // namespace ddp::agent
