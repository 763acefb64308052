#include "worker_stdio.hpp"

#include <fcntl.h>
#include <pty.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>

#include "ddp/common/error.hpp"

namespace ddp::agent {

std::optional<struct winsize> terminal_size(int fd) {
  struct winsize ws {};
  if (::isatty(fd) == 0 || ::ioctl(fd, TIOCGWINSZ, &ws) != 0) return std::nullopt;
  return ws;
}

bool open_output_pty(const struct winsize& size, int& master, int& slave, std::string& error) {
  struct termios tio {};
  ::cfmakeraw(&tio);
  // Raw but for output post-processing: the worker's '\n' reaches the agent as
  // '\n', and the agent's own terminal adds the '\r'.
  tio.c_oflag = OPOST;
  struct winsize ws = size;
  if (::openpty(&master, &slave, nullptr, &tio, &ws) != 0) {
    error = "openpty: " + errno_text(errno);
    master = slave = -1;
    return false;
  }
  ::fcntl(master, F_SETFD, FD_CLOEXEC);
  ::fcntl(slave, F_SETFD, FD_CLOEXEC);
  return true;
}

void resize_ptys(int out_master, int err_master, const struct winsize& size) {
  for (int fd : {out_master, err_master}) {
    if (fd >= 0) ::ioctl(fd, TIOCSWINSZ, &size);
  }
}

}  // namespace ddp::agent
