#include "proc_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <map>

#include "ddp/common/parse.hpp"

namespace ddp::guard {

bool read_proc(pid_t pid, ProcInfo* out) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // "PID (COMM) S PPID PGRP ...": COMM may hold spaces and parentheses, so the
  // fields after it are found from the last ')'.
  const std::string text(buf, static_cast<std::size_t>(n));
  const auto open = text.find('(');
  const auto close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 2 >= text.size()) return false;
  out->pid = pid;
  out->comm = text.substr(open + 1, close - open - 1);
  // A process names itself (PR_SET_NAME): what a terminal would act on is
  // shown as '?' in the guard's lines.
  for (char& c : out->comm) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  }
  const char* p = text.c_str() + close + 2;
  out->state = *p;
  // number-parse-ok: the fields of /proc/<pid>/stat are scanned in place,
  // each strtol starting where the last one ended.
  char* end = nullptr;
  out->ppid = static_cast<pid_t>(std::strtol(p + 1, &end, 10));
  out->pgid = static_cast<pid_t>(std::strtol(end, &end, 10));
  // Fields 6 to 21 (session ... itrealvalue) lie between pgrp and starttime.
  for (int field = 6; field <= 21; ++field) std::strtoll(end, &end, 10);
  out->start_time = std::strtoull(end, nullptr, 10);
  return true;
}

std::vector<ProcInfo> descendants(pid_t root) {
  std::multimap<pid_t, ProcInfo> by_parent;
  if (DIR* d = ::opendir("/proc")) {
    while (const dirent* e = ::readdir(d)) {
      const auto pid = parse_int<pid_t>(e->d_name);
      if (!pid || *pid <= 0) continue;
      ProcInfo info;
      if (read_proc(*pid, &info)) by_parent.emplace(info.ppid, info);
    }
    ::closedir(d);
  }
  std::vector<ProcInfo> out;
  std::vector<pid_t> frontier{root};
  while (!frontier.empty()) {
    const pid_t parent = frontier.back();
    frontier.pop_back();
    auto [lo, hi] = by_parent.equal_range(parent);
    for (auto it = lo; it != hi; ++it) {
      frontier.push_back(it->second.pid);
      if (it->second.state != 'Z' && it->second.state != 'X') out.push_back(it->second);
    }
  }
  return out;
}

std::string state_text(char state) {
  switch (state) {
    case 'R':
      return "R (running)";
    case 'S':
      return "S (sleeping)";
    case 'D':
      return "D (disk sleep)";
    case 'T':
      return "T (stopped)";
    case 't':
      return "t (tracing stop)";
    case 'Z':
      return "Z (zombie)";
    default:
      return std::string(1, state);
  }
}

}  // namespace ddp::guard
