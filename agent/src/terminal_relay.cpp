#include "terminal_relay.hpp"

#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <cerrno>

#include "ddp/common/error.hpp"

namespace ddp::agent {

namespace asio = boost::asio;

namespace {

// While the agent is in the background (Ctrl-Z, bg) reading the terminal would
// stop it with SIGTTIN: it checks again this often instead.
constexpr std::chrono::milliseconds kBackgroundRetry{250};

bool in_foreground(int fd) { return ::tcgetpgrp(fd) == ::getpgrp(); }

}  // namespace

TerminalRelay::TerminalRelay(asio::io_context& io, std::shared_ptr<ConsoleLine> line)
    : tty_(io), pty_(io), retry_(io), line_(std::move(line)) {
  if (::isatty(0) == 0 || !in_foreground(0)) return;
  const char* name = ::ttyname(0);
  if (name == nullptr) return;
  // A file description of our own: non-blocking mode on fd 0 would be shared
  // with the shell and outlive us.
  const int fd = ::open(name, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  tty_.assign(fd);
  have_saved_ = ::tcgetattr(fd, &saved_) == 0;
}

TerminalRelay::~TerminalRelay() { close_pipe(); }

int TerminalRelay::open_pipe(std::string& error) {
  close_pipe();
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    error = "pipe: " + errno_text(errno);
    return -1;
  }
  // Typing ahead of a worker that never reads must not block the agent: past
  // the pipe's buffer, input is dropped.
  ::fcntl(fds[1], F_SETFL, O_NONBLOCK);
  pipe_write_ = fds[1];
  wait_readable();
  return fds[0];
}

int TerminalRelay::open_pty(const struct winsize& size, std::function<void(std::string_view)> echo,
                            std::string& error) {
  close_pipe();
  if (!have_saved_) {
    error = "cannot read the terminal's settings";
    return -1;
  }
  // The terminal's own settings (erase and end-of-file keys, ICRNL, echo), but
  // '\n' stays '\n' on the way out, as on the output ptys.
  struct termios tio = saved_;
  tio.c_oflag &= ~static_cast<tcflag_t>(ONLCR);
  struct winsize ws = size;
  int master = -1;
  int slave = -1;
  if (::openpty(&master, &slave, nullptr, &tio, &ws) != 0) {
    error = "openpty: " + errno_text(errno);
    return -1;
  }
  ::fcntl(master, F_SETFD, FD_CLOEXEC);
  ::fcntl(slave, F_SETFD, FD_CLOEXEC);
  // Typing ahead of a worker that never reads must not block the agent.
  ::fcntl(master, F_SETFL, O_NONBLOCK);
  pty_.assign(master);
  pipe_write_ = master;
  echo_ = std::move(echo);
  enter_raw(false);
  if (!continued_) {
    continued_ = std::make_unique<asio::signal_set>(tty_.get_executor(), SIGCONT);
    wait_continued();
  }
  wait_readable();
  wait_echo();
  return slave;
}

void TerminalRelay::resize(const struct winsize& size) {
  if (pty_.is_open()) ::ioctl(pty_.native_handle(), TIOCSWINSZ, &size);
}

void TerminalRelay::close_pipe() {
  if (pty_.is_open()) {
    // Closing the master hangs up the worker's end: its reads return EOF.
    boost::system::error_code ignored;
    pty_.close(ignored);
    echo_ = nullptr;
    leave_raw();
  } else if (pipe_write_ >= 0) {
    ::close(pipe_write_);
  }
  pipe_write_ = -1;
}

void TerminalRelay::enter_raw(bool again) {
  if ((raw_ && !again) || !tty_.is_open() || !in_foreground(tty_.native_handle())) return;
  struct termios tio = saved_;
  // Keys reach the worker's pty as typed, one at a time, unechoed: its line
  // discipline or readline edits and echoes. ISIG stays: Ctrl-C, Ctrl-\ and
  // Ctrl-Z signal the agent's process group, as before.
  tio.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO | ECHOE | ECHOK | ECHONL | IEXTEN);
  tio.c_iflag &= ~static_cast<tcflag_t>(ICRNL | INLCR | IGNCR | ISTRIP);
  tio.c_cc[VMIN] = 1;
  tio.c_cc[VTIME] = 0;
  if (::tcsetattr(tty_.native_handle(), TCSANOW, &tio) == 0) raw_ = true;
}

void TerminalRelay::leave_raw() {
  if (!raw_) return;
  raw_ = false;
  // In the background the shell has the terminal, in the mode it wants; a
  // write to it from here would stop the agent (SIGTTOU).
  if (tty_.is_open() && in_foreground(tty_.native_handle())) {
    ::tcsetattr(tty_.native_handle(), TCSANOW, &saved_);
  }
}

void TerminalRelay::wait_continued() {
  continued_->async_wait([this](boost::system::error_code ec, int) {
    if (ec) return;
    // After Ctrl-Z the shell set its own mode; back in the foreground, the
    // reader's pty needs ours again.
    if (pty_.is_open()) enter_raw(true);
    wait_continued();
  });
}

void TerminalRelay::wait_readable() {
  if (waiting_ || !tty_.is_open()) return;
  waiting_ = true;
  tty_.async_wait(asio::posix::descriptor_base::wait_read, [this](boost::system::error_code ec) {
    waiting_ = false;
    if (!ec) on_readable();
  });
}

void TerminalRelay::on_readable() {
  if (!in_foreground(tty_.native_handle())) {
    retry_.expires_after(kBackgroundRetry);
    retry_.async_wait([this](boost::system::error_code ec) {
      if (!ec) wait_readable();
    });
    return;
  }
  if (pty_.is_open() && !raw_) enter_raw(false);  // came back to the foreground (bg, then fg)
  std::array<char, 4096> buf{};
  const ssize_t n = ::read(tty_.native_handle(), buf.data(), buf.size());
  if (n == 0) {
    close_pipe();  // Ctrl-D: the worker reads EOF; the next attempt gets a new pipe
    return;
  }
  if (n < 0 && errno != EAGAIN && errno != EINTR) {
    // EIO: the terminal hung up. Nothing more will come from it.
    close_pipe();
    boost::system::error_code ignored;
    tty_.close(ignored);
    return;
  }
  if (n > 0 && pipe_write_ >= 0) {
    // Short or failed writes (a full pipe, a worker gone) drop the input.
    [[maybe_unused]] const ssize_t w = ::write(pipe_write_, buf.data(), static_cast<std::size_t>(n));
    if (!pty_.is_open() && buf[static_cast<std::size_t>(n) - 1] == '\n' && line_->at_line_start != nullptr) {
      // The terminal echoed the Enter: the prompt's line is over.
      line_->end_line_by_echo();
    }
  }
  if (pipe_write_ >= 0) wait_readable();
}

void TerminalRelay::wait_echo() {
  pty_.async_wait(asio::posix::descriptor_base::wait_read, [this](boost::system::error_code ec) {
    if (!ec) on_echo();
  });
}

void TerminalRelay::on_echo() {
  std::array<char, 4096> buf{};
  const ssize_t n = ::read(pty_.native_handle(), buf.data(), buf.size());
  if (n > 0) {
    if (echo_) echo_(std::string_view(buf.data(), static_cast<std::size_t>(n)));
    wait_echo();
  } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
    wait_echo();
  } else {
    // EIO: every copy of the worker's end is closed (it exited): nobody reads
    // the terminal now, so it gets its own mode back.
    close_pipe();
  }
}

}  // namespace ddp::agent
