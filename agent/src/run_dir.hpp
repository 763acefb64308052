// The per-run directory: <log_dir>/<run_id>, <log_dir>/none_XXXXXX (a new
// one per run) when there is no --rdzv_id, or a temp dir when no --log_dir
// was given: $TMPDIR/ddprun-<run_id>-XXXXXX, or, when TMPDIR is unset and no
// worker log is written there, one in a memory filesystem ($XDG_RUNTIME_DIR
// or /dev/shm), where its ~20 small files and directories cost microseconds
// instead of a disk filesystem's inode allocation (docs/data/performance-history.md,
// "Launch floor"). Holds attempt_<k>/<local_rank>/{stdout,stderr}.log, error.json
// and attempt_<k>/failure.json. A temp dir is kept when the run failed, for
// its failure report.
#pragma once

#include <filesystem>
#include <string>

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

 private:
  std::filesystem::path path_;
  bool temp_ = false;
  bool keep_ = false;
};

}  // namespace ddp::agent
