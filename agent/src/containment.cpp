#include "containment.hpp"

#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <sstream>

#include "cgroup_scope.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "guard_protocol.hpp"
#include "stale_cgroups.hpp"

namespace ddp::agent {

namespace fs = std::filesystem;

namespace {

std::string find_guard() {
  std::error_code ec;
  const auto self = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> candidates;
  if (!ec) candidates.push_back(self.parent_path() / "ddp-guard");
  candidates.emplace_back(DDP_GUARD_INSTALL_PATH);
  for (const auto& c : candidates) {
    if (::access(c.c_str(), X_OK) == 0) return c.string();
  }
  log::get("agent")->warn(
      "ddp-guard not found (looked beside {} and at {}): workers run without containment, and processes "
      "that leave a worker's process group may outlive ddprun; reinstall ddprun",
      ec ? std::string("ddprun") : self.string(), DDP_GUARD_INSTALL_PATH);
  return "";
}

std::mutex fence_mu;
std::string fence_file;  // under fence_mu: set on the io thread, read on the spawner thread

}  // namespace

void set_guard_fence_file(const std::string& path) {
  std::lock_guard<std::mutex> lock(fence_mu);
  fence_file = path;
}

std::string guard_fence_file() {
  std::lock_guard<std::mutex> lock(fence_mu);
  return fence_file;
}

const std::string& guard_executable() {
  static const std::string path = find_guard();
  return path;
}

std::vector<std::string> guard_args(const std::string& executable, const std::vector<std::string>& args,
                                    std::chrono::milliseconds stop_timeout, int info_fd) {
  std::vector<std::string> out = {
      guard::kStopTimeoutFlag + std::to_string(stop_timeout.count()),
      guard::kInfoFdFlag + std::to_string(info_fd),
      guard::kAgentPidFlag + std::to_string(::getpid()),
  };
  if (const std::string fence = guard_fence_file(); !fence.empty())
    out.push_back(guard::kFenceFileFlag + fence);
  out.push_back("--");
  out.push_back(executable);
  out.insert(out.end(), args.begin(), args.end());
  return out;
}

GuardReport parse_guard_report(const std::string& text, const std::string& executable) {
  GuardReport r;
  std::istringstream lines(text);
  std::string key;
  while (lines >> key) {
    if (key == guard::kInfoPid) {
      lines >> r.worker_pid;
    } else if (key == guard::kInfoCgroup) {
      lines >> r.cgroup;
    } else if (key == guard::kInfoError) {
      int err = 0;
      lines >> err;
      r.error = "cannot start " + executable + ": " + errno_text(err);
    }
  }
  if (r.error.empty() && r.worker_pid <= 0)
    r.error = "cannot start " + executable + ": ddp-guard exited before starting it";
  return r;
}

void release_cgroup(const std::string& path) { guard::kill_and_remove_cgroup(path); }

void reap_stale_cgroups() {
  // The guards' cgroups sit in their agent's cgroup, which may be anywhere (a
  // login session, a service, a job step): the next ddprun may run elsewhere.
  // Deep enough for any real layout, and a walk of names only.
  constexpr int kMaxDepth = 16;
  for (const auto& stale : guard::reap_stale_guard_cgroups(guard::unified_root(), kMaxDepth)) {
    if (guard::worth_telling(stale)) {
      log::get("agent")->warn("{}", guard::describe(stale));
    } else {
      log::get("agent")->debug("{}", guard::describe(stale));
    }
  }
}

}  // namespace ddp::agent
