#include "pty_session.hpp"

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>

#include "test_support.hpp"

namespace ddp::test {

PtySession::PtySession(std::vector<std::string> argv, const std::string& dir,
                       std::map<std::string, std::optional<std::string>> env, int cols, int rows) {
  ExecArgs exec(std::move(argv), env);

  struct winsize ws {};
  ws.ws_col = static_cast<unsigned short>(cols);
  ws.ws_row = static_cast<unsigned short>(rows);
  pid_ = ::forkpty(&master_, nullptr, nullptr, &ws);
  if (pid_ < 0) throw std::runtime_error("forkpty failed");
  if (pid_ == 0) {
    if (::chdir(dir.c_str()) != 0) ::_exit(126);
    ::execve(exec.path(), exec.argv(), exec.envp());
    ::_exit(127);
  }
}

PtySession::~PtySession() {
  if (!status_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (master_ >= 0) ::close(master_);
}

void PtySession::pump(std::chrono::milliseconds max_wait) {
  struct pollfd p {
    master_, POLLIN, 0
  };
  if (::poll(&p, 1, static_cast<int>(max_wait.count())) <= 0) return;
  char buf[4096];
  const ssize_t n = ::read(master_, buf, sizeof(buf));
  if (n > 0) screen_.append(buf, static_cast<std::size_t>(n));
}

const std::string& PtySession::screen() {
  pump(std::chrono::milliseconds(0));
  return screen_;
}

bool PtySession::wait_for(const std::string& text, std::chrono::milliseconds timeout, std::size_t from) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (screen_.find(text, from) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    pump(std::chrono::milliseconds(20));
  }
  return true;
}

void PtySession::type(const std::string& keys) {
  [[maybe_unused]] const ssize_t n = ::write(master_, keys.data(), keys.size());
}

void PtySession::resize(int cols, int rows) {
  struct winsize ws {};
  ws.ws_col = static_cast<unsigned short>(cols);
  ws.ws_row = static_cast<unsigned short>(rows);
  ::ioctl(master_, TIOCSWINSZ, &ws);
}

bool PtySession::cooked() const {
  struct termios tio {};
  // On Linux the master reports the terminal's (the slave's) modes.
  return ::tcgetattr(master_, &tio) == 0 && (tio.c_lflag & ICANON) != 0 && (tio.c_lflag & ECHO) != 0;
}

std::optional<int> PtySession::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!status_) {
    int st = 0;
    const pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    pump(std::chrono::milliseconds(20));  // keep reading: a full terminal blocks the writer
  }
  while (true) {  // what is left on the screen
    const auto before = screen_.size();
    pump(std::chrono::milliseconds(0));
    if (screen_.size() == before) break;
  }
  return status_;
}

}  // namespace ddp::test
