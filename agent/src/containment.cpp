#include "containment.hpp"

#include <poll.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "cgroup_scope.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "guard_protocol.hpp"

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

}  // namespace

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
      "--",
      executable,
  };
  out.insert(out.end(), args.begin(), args.end());
  return out;
}

GuardReport read_guard_report(int fd, const std::string& executable, std::chrono::milliseconds timeout) {
  GuardReport r;
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::max<long>(0, left.count())));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      r.error = "cannot start " + executable + ": ddp-guard did not report within " +
                std::to_string(timeout.count()) + " ms";
      return r;
    }
    char buf[512];
    const ssize_t got = ::read(fd, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    text.append(buf, static_cast<std::size_t>(got));
  }
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

}  // namespace ddp::agent
