#include "run_dir.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::agent {

namespace fs = std::filesystem;

namespace {

bool in_memory(const char* dir) {
  struct statfs st {};
  return ::statfs(dir, &st) == 0 && (st.f_type == TMPFS_MAGIC || st.f_type == RAMFS_MAGIC);
}

// A temp run dir in a memory filesystem, or "" when none takes one.
std::string memory_temp_dir(const std::string& run_id) {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  for (const char* base : {runtime, "/dev/shm"}) {
    if (base == nullptr || *base != '/' || !in_memory(base)) continue;
    std::string tmpl = std::string(base) + "/ddprun-" + run_id + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) return tmpl;
  }
  return "";
}

// Removes what only a running agent uses from `dir`, and the directories
// that leaves empty (RunDir::prune()).
void prune_dir(const fs::path& dir) {
  std::error_code ec;
  for (const char* name :
       {RunDir::kFence, RunDir::kLivenessPipe, RunDir::kTimerPipe, RunDir::kZygoteSocket}) {
    fs::remove(dir / name, ec);
  }
  // Bottom-up, so that a directory emptied here is seen empty by its parent.
  std::vector<fs::path> dirs;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const auto& entry = *it;
    if (entry.is_directory(ec)) {
      dirs.push_back(entry.path());
      continue;
    }
    const auto name = entry.path().filename();
    if (name == RunDir::kLivenessFile || (name == RunDir::kPythonStacks && entry.file_size(ec) == 0)) {
      fs::remove(entry.path(), ec);
    }
  }
  for (auto d = dirs.rbegin(); d != dirs.rend(); ++d) {
    if (fs::is_empty(*d, ec)) fs::remove(*d, ec);
  }
}

}  // namespace

int RunDir::sweep_stale(const fs::path& base, const std::atomic<bool>* stop) {
  int swept = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator(base, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) break;
    const fs::path dir = it->path();
    if (dir.filename().string().rfind("ddprun-", 0) != 0) continue;
    // The entry's type comes with the listing: one open() per candidate, no stat.
    std::error_code type_ec;
    if (it->is_symlink(type_ec) || !it->is_directory(type_ec)) continue;
    const fs::path lock = dir / kAgentLock;
    const int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;  // no lock: a kept dir, or an agent that makes none
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
      ::close(fd);  // another user's
      continue;
    }
    // Still there once locked: another agent's sweep did not take it first.
    std::error_code rm;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && fs::exists(lock, rm)) {
      prune_dir(dir);
      fs::remove(lock, rm);
      if (fs::is_empty(dir, rm)) fs::remove(dir, rm);
      ++swept;
    }
    ::close(fd);
  }
  return swept;
}

// Locked before it is named agent.lock, so that a sweeping agent never finds
// it unlocked while this agent runs.
void RunDir::lock_temp() {
  const fs::path fresh = path_ / (std::string(kAgentLock) + ".new");
  const int fd = ::open(fresh.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;  // no lock: the dir is simply not swept if this agent is killed
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0 || ::rename(fresh.c_str(), (path_ / kAgentLock).c_str()) != 0) {
    ::close(fd);
    ::unlink(fresh.c_str());
    return;
  }
  lock_fd_ = fd;
  // Off the launch's path, and cut short when the run ends first: a base with
  // thousands of entries takes ~10 ms.
  sweeper_ = std::thread([this, base = path_.parent_path()] {
    const auto started = std::chrono::steady_clock::now();
    const int swept = sweep_stale(base, &stop_sweep_);
    log::get("agent")->debug(
        "looked for run directories left by killed agents in {}: {} pruned, {} us", base.string(), swept,
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started)
            .count());
    // Not this run's business: a line a user would see only on a busy box.
    if (swept > 0) {
      log::get("agent")->debug("pruned {} run director{} in {} left by killed agents", swept,
                               swept == 1 ? "y" : "ies", base.string());
    }
  });
}

RunDir::RunDir(const fs::path& log_dir, const std::string& run_id, bool worker_logs) {
  if (!log_dir.empty() && run_id == kNoRunId) {
    // No --rdzv_id: every run would share <log_dir>/none and overwrite the
    // last one's logs. As torchrun, each run gets a directory of its own.
    std::error_code ec;
    fs::create_directories(log_dir, ec);
    std::string tmpl = (log_dir / (run_id + "_XXXXXX")).string();
    if (ec || ::mkdtemp(tmpl.data()) == nullptr) {
      throw ConfigError("--log_dir: cannot create a directory in " + log_dir.string() + ": " +
                        (ec ? ec.message() : errno_text(errno)));
    }
    path_ = tmpl;
    return;
  }
  if (!log_dir.empty()) {
    path_ = log_dir / run_id;
    std::error_code ec;
    fs::create_directories(path_, ec);
    if (ec) throw ConfigError("--log_dir: cannot create " + path_.string() + ": " + ec.message());
    return;
  }
  const char* tmp = std::getenv("TMPDIR");
  temp_ = true;
  if ((tmp == nullptr || *tmp == '\0') && !worker_logs) {
    path_ = memory_temp_dir(run_id);
    if (!path_.empty()) {
      lock_temp();
      return;
    }
  }
  std::string tmpl =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/ddprun-" + run_id + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    throw ConfigError("cannot create a temp dir " + tmpl +
                      " (set TMPDIR or --log_dir): " + errno_text(errno));
  }
  path_ = tmpl;
  lock_temp();
}

RunDir::~RunDir() {
  stop_sweep_ = true;
  if (sweeper_.joinable()) sweeper_.join();
  std::error_code ec;
  if (temp_ && !keep_) {
    fs::remove_all(path_, ec);
  } else {
    prune();
    if (lock_fd_ >= 0) fs::remove(path_ / kAgentLock, ec);
    // A kept temp dir with nothing left to read (a run that failed before its
    // first attempt) is not worth keeping.
    if (temp_ && fs::is_empty(path_, ec)) fs::remove(path_, ec);
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void RunDir::prune() const { prune_dir(path_); }

fs::path RunDir::attempt(int k) const { return path_ / ("attempt_" + std::to_string(k)); }

fs::path RunDir::worker(int k, int local_rank) const { return attempt(k) / std::to_string(local_rank); }

void RunDir::prepare_attempt(int k, int nproc) const {
  for (int lr = 0; lr < nproc; ++lr) {
    const auto dir = worker(k, lr);
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw ConfigError("--log_dir: cannot create " + dir.string() + ": " + ec.message());
    fs::remove(dir / "error.json", ec);
  }
}

}  // namespace ddp::agent
