#include "ddp/common/proc_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace ddp {

std::optional<std::string> read_fd_to_end(int fd) {
  std::string out;
  char buf[4096];
  while (true) {
    const auto n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0) {
      return out;
    } else if (errno != EINTR) {
      return std::nullopt;
    }
  }
}

std::optional<std::string> read_proc_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  auto text = read_fd_to_end(fd);
  ::close(fd);
  return text;
}

std::optional<pid_t> proc_parent(pid_t pid) {
  const auto stat = read_proc_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return std::nullopt;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
  const auto close = stat->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  char state = 0;
  int ppid = -1;
  if (std::sscanf(stat->c_str() + close + 1, " %c %d", &state, &ppid) != 2) return std::nullopt;
  return static_cast<pid_t>(ppid);
}

}  // namespace ddp
