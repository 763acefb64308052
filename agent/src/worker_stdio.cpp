#include "worker_stdio.hpp"

#include <fcntl.h>
#include <pty.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "ddp/common/error.hpp"

namespace ddp::agent {

std::optional<struct winsize> terminal_size(int fd) {
  struct winsize ws {};
  if (::isatty(fd) == 0 || ::ioctl(fd, TIOCGWINSZ, &ws) != 0) return std::nullopt;
  return ws;
}

int display_columns(const std::string& text) {
  int cols = 0;
  for (const char c : text) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++cols;  // not a continuation byte
  }
  return cols;
}

struct winsize worker_window(const struct winsize& terminal, int prefix_cols) {
  struct winsize ws = terminal;
  if (ws.ws_col == 0 || prefix_cols <= 0) return ws;
  const int cols = std::max(1, static_cast<int>(ws.ws_col) - prefix_cols);
  ws.ws_xpixel = static_cast<unsigned short>(ws.ws_xpixel * cols / ws.ws_col);
  ws.ws_col = static_cast<unsigned short>(cols);
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
