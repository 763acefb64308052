#include "cgroup_scope.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <thread>

#include "stale_cgroups.hpp"

namespace ddp::guard {

namespace {

bool is_cgroup2(const std::string& dir) {
  struct statfs fs {};
  return ::statfs(dir.c_str(), &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC;
}

// This process's cgroup in the unified hierarchy ("0::/path" in /proc/self/cgroup).
// Plain read(): the guard runs once per worker, and a stream costs more than the file.
std::string own_cgroup() {
  const int fd = ::open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) text.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    if (text.compare(pos, 3, "0::") == 0) return text.substr(pos + 3, end - pos - 3);
    pos = end + 1;
  }
  return "";
}

bool write_text(const std::string& file, const char* text, std::size_t len) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text, len) == static_cast<ssize_t>(len);
  ::close(fd);
  return ok;
}

std::vector<std::string> nested_cgroups(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.is_directory(ec) && !e.is_symlink(ec)) out.push_back(e.path().string());
  }
  return out;
}

// rmdir of `dir`, after its child cgroups (deepest first) where it has any: a
// preload zygote's cgroup holds one per worker forked from it (docs/agent-preload.md,
// "Preloading"), left behind when those workers' guards were killed with the
// tree. A cgroup's files cannot be removed and need not be: rmdir takes them.
// The usual cgroup has no child: one rmdir, no directory read.
bool remove_tree(const std::string& dir) {
  if (::rmdir(dir.c_str()) == 0) return true;
  if (errno != EBUSY && errno != ENOTEMPTY) return false;
  for (const auto& child : nested_cgroups(dir)) remove_tree(child);
  return ::rmdir(dir.c_str()) == 0;
}

std::vector<pid_t> members(const std::string& dir) {
  std::ifstream in(dir + "/cgroup.procs");
  std::vector<pid_t> out;
  pid_t pid = 0;
  while (in >> pid) out.push_back(pid);
  return out;
}

}  // namespace

std::string unified_root() {
  for (const char* dir : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    if (is_cgroup2(dir)) return dir;
  }
  return "";
}

std::string own_cgroup_dir() {
  const std::string root = unified_root();
  if (root.empty()) return "";
  std::string own = own_cgroup();
  if (own.empty() || own.find("..") != std::string::npos) return "";
  if (own == "/") own.clear();
  return root + own;
}

std::unique_ptr<CgroupScope> CgroupScope::create(pid_t guard_pid, const std::string& parent) {
  const std::string owner = owner_name(guard_pid);
  if (parent.empty() || owner.empty()) return nullptr;
  const std::string path = parent + "/" + std::string(kGuardCgroupPrefix) + owner;
  if (::mkdir(path.c_str(), 0755) != 0) return nullptr;
  // Without the fd the cgroup still works: fork_into() fails and the caller joins.
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  return std::unique_ptr<CgroupScope>(new CgroupScope(path, fd));
}

CgroupScope::CgroupScope(std::string path, int dir_fd)
    : path_(std::move(path)), dir_fd_(dir_fd), procs_file_(path_ + "/cgroup.procs") {}

CgroupScope::~CgroupScope() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
  if (!removed_) remove_tree(path_);
}

bool CgroupScope::remove() {
  removed_ = remove_tree(path_);
  return removed_;
}

pid_t CgroupScope::fork_into() const {
  if (dir_fd_ < 0) {
    errno = EBADF;
    return -1;
  }
  clone_args args{};
  args.flags = CLONE_INTO_CGROUP;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<std::uint64_t>(dir_fd_);
  return static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof(args)));
}

bool CgroupScope::join_self() const { return write_text(procs_file_, "0\n", 2); }

bool CgroupScope::join(pid_t pid) const {
  const std::string text = std::to_string(pid) + "\n";
  return write_text(procs_file_, text.c_str(), text.size());
}

bool CgroupScope::kill_all() const { return write_text(path_ + "/cgroup.kill", "1\n", 2); }

std::size_t kill_cgroup_tree(const std::string& path) {
  std::size_t found = members(path).size();
  std::vector<std::string> nested = nested_cgroups(path);
  for (std::size_t i = 0; i < nested.size(); ++i) {
    found += members(nested[i]).size();
    for (auto& deeper : nested_cgroups(nested[i])) nested.push_back(std::move(deeper));
  }
  // One write kills the whole subtree; before Linux 5.14, each member.
  if (!write_text(path + "/cgroup.kill", "1\n", 2)) {
    nested.push_back(path);
    for (const auto& dir : nested) {
      for (pid_t pid : members(dir)) ::kill(pid, SIGKILL);
    }
  }
  return found;
}

bool remove_cgroup_tree(const std::string& path) {
  // rmdir succeeds once the last member is gone; bounded, never blocks the caller long.
  for (int i = 0; i < 100; ++i) {
    if (remove_tree(path)) return true;
    if (errno != EBUSY) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

void kill_and_remove_cgroup(const std::string& path) {
  if (path.empty() || ::access(path.c_str(), F_OK) != 0) return;
  kill_cgroup_tree(path);
  remove_cgroup_tree(path);
}

}  // namespace ddp::guard
