#include "terminal_relay.hpp"

#include <fcntl.h>
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
    : tty_(io), retry_(io), line_(std::move(line)) {
  if (::isatty(0) == 0 || !in_foreground(0)) return;
  const char* name = ::ttyname(0);
  if (name == nullptr) return;
  // A file description of our own: non-blocking mode on fd 0 would be shared
  // with the shell and outlive us.
  const int fd = ::open(name, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  tty_.assign(fd);
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

void TerminalRelay::close_pipe() {
  if (pipe_write_ >= 0) ::close(pipe_write_);
  pipe_write_ = -1;
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
  std::array<char, 4096> buf{};
  const ssize_t n = ::read(tty_.native_handle(), buf.data(), buf.size());
  if (n == 0) {
    close_pipe();  // Ctrl-D: the worker reads EOF; the next attempt gets a new pipe
    return;
  }
  if (n < 0 && errno != EAGAIN && errno != EINTR) {
    // EIO: the terminal hung up. Nothing more will come from it.
    boost::system::error_code ignored;
    tty_.close(ignored);
    close_pipe();
    return;
  }
  if (n > 0 && pipe_write_ >= 0) {
    // Short or failed writes (a full pipe, a worker gone) drop the input.
    [[maybe_unused]] const ssize_t w = ::write(pipe_write_, buf.data(), static_cast<std::size_t>(n));
    if (buf[static_cast<std::size_t>(n) - 1] == '\n' && line_->at_line_start != nullptr) {
      // The terminal echoed the Enter: the prompt's line is over.
      *line_->at_line_start = true;
      *line_ = {};
    }
  }
  if (pipe_write_ >= 0) wait_readable();
}

}  // namespace ddp::agent
