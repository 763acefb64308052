// The per-run directory: <log_dir>/<run_id>, <log_dir>/none_XXXXXX (a new
// one per run) when there is no --rdzv_id, or a temp dir when no --log_dir
// was given: $TMPDIR/ddprun-<run_id>-XXXXXX, or, when TMPDIR is unset and no
// worker log is written there, one in a memory filesystem ($XDG_RUNTIME_DIR
// or /dev/shm), where its ~20 small files and directories cost microseconds
// instead of a disk filesystem's inode allocation (docs/data/performance-history.md,
// "Launch floor"). Holds attempt_<k>/<local_rank>/{stdout,stderr}.log, error.json
// and attempt_<k>/failure.json. A temp dir is kept when the run failed, for
// its failure report.
//
// A temp dir's agent holds an flock on its agent.lock while it runs. An
// agent killed (SIGKILL, the OOM killer) leaves its temp dir behind with the
// running agent's files in it; the next agent that makes a temp dir in the
// same place takes the lock of each such dir and prunes it as its own agent
// would have at exit (removed when nothing is left to read).
#pragma once

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>

namespace ddp::agent {

class RunDir {
 public:
  // The run id when none was given (torchrun's default --rdzv_id).
  static constexpr const char* kNoRunId = "none";

  // Creates the directory. Throws ConfigError naming --log_dir when it cannot.
  // `worker_logs`: worker output may be written there (--redirects, --tee,
  // --duplicate_std*_filters), so a temp dir stays off memory.
  RunDir(const std::filesystem::path& log_dir, const std::string& run_id, bool worker_logs = true);
  // Removes a temp dir unless keep() was called; otherwise prune()s it.
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  bool is_temp() const { return temp_; }
  std::filesystem::path attempt(int k) const;
  std::filesystem::path worker(int k, int local_rank) const;
  // Creates attempt_<k>/<lr>/ for every local rank and removes an error file
  // left by an earlier run there, so a stale one is never reported.
  void prepare_attempt(int k, int nproc) const;
  void keep() { keep_ = true; }
  // Removes what only a running agent uses (the fence, the liveness files and
  // pipes, the zygote's socket, empty stack dumps) and the directories that
  // leaves empty, so that a kept or --log_dir run directory holds only what
  // explains the run: logs, error files, failure reports, stacks.
  void prune() const;

  // The files of a running agent, in path() (the first four) and in a
  // worker's directory (the last two); prune() removes them.
  static constexpr const char* kFence = "fence";
  static constexpr const char* kLivenessPipe = "liveness.pipe";
  static constexpr const char* kTimerPipe = "watchdog_timer.pipe";
  static constexpr const char* kZygoteSocket = "zygote.sock";
  static constexpr const char* kLivenessFile = "liveness";
  static constexpr const char* kPythonStacks = "python_stacks.txt";  // removed when empty
  static constexpr const char* kAgentLock = "agent.lock";  // a temp dir's, locked while its agent runs

  // Prunes the temp run dirs in `base` (ddprun-*, this user's) whose agent
  // was killed: those with an agent.lock that no process holds. Returns how
  // many it pruned; a dir left with something to read (logs, error files) is
  // kept, the others are removed. Stops early once `stop` is set.
  static int sweep_stale(const std::filesystem::path& base, const std::atomic<bool>* stop = nullptr);

 private:
  void lock_temp();

  std::filesystem::path path_;
  bool temp_ = false;
  bool keep_ = false;
  int lock_fd_ = -1;  // agent.lock of a temp dir, flock()ed while this agent runs
  std::atomic<bool> stop_sweep_{false};
  std::thread sweeper_;  // sweep_stale() of the dir's base, started by lock_temp()
};

}  // namespace ddp::agent
