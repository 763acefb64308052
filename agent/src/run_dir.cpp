#include "run_dir.hpp"

#include <linux/magic.h>
#include <stdlib.h>
#include <sys/statfs.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

#include "ddp/common/error.hpp"

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

}  // namespace

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
    if (!path_.empty()) return;
  }
  std::string tmpl =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/ddprun-" + run_id + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    throw ConfigError("cannot create a temp dir " + tmpl +
                      " (set TMPDIR or --log_dir): " + errno_text(errno));
  }
  path_ = tmpl;
}

RunDir::~RunDir() {
  std::error_code ec;
  if (temp_ && !keep_) {
    fs::remove_all(path_, ec);
    return;
  }
  prune();
  // A kept temp dir with nothing left to read (a run that failed before its
  // first attempt) is not worth keeping.
  if (temp_ && fs::is_empty(path_, ec)) fs::remove(path_, ec);
}

void RunDir::prune() const {
  std::error_code ec;
  for (const char* name : {kFence, kLivenessPipe, kTimerPipe, kZygoteSocket}) {
    fs::remove(path_ / name, ec);
  }
  // Bottom-up, so that a directory emptied here is seen empty by its parent.
  std::vector<fs::path> dirs;
  for (auto it = fs::recursive_directory_iterator(path_, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const auto& entry = *it;
    if (entry.is_directory(ec)) {
      dirs.push_back(entry.path());
      continue;
    }
    const auto name = entry.path().filename();
    if (name == kLivenessFile || (name == kPythonStacks && entry.file_size(ec) == 0)) {
      fs::remove(entry.path(), ec);
    }
  }
  for (auto d = dirs.rbegin(); d != dirs.rend(); ++d) {
    if (fs::is_empty(*d, ec)) fs::remove(*d, ec);
  }
}

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
