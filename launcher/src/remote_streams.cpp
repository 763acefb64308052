#include "remote_streams.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace ddp::launcher {
namespace {

// Record separator (octal 036: "\x1edd..." would read as one long hex
// escape), then a word: what no program's console output holds by chance.
constexpr std::string_view kMark = "\036ddprun:";
constexpr char kEndOfChannel = '\x1f';
// A longer "channel" is text that happened to hold the mark.
constexpr std::size_t kMaxChannel = 32;
// A stderr "line" without a newline for this long goes out in parts, so the
// pump's memory stays bounded (progress bars, binary output).
constexpr std::size_t kMaxLine = 64 * 1024;

void write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the terminal is gone (hung up): nobody reads it
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace

std::string channel_line(std::string_view channel, std::string_view payload) {
  std::string out;
  out.reserve(kMark.size() + channel.size() + payload.size() + 2);
  out.append(kMark).append(channel).append(1, kEndOfChannel);
  for (char c : payload) out += c == '\n' ? ' ' : c;
  out += '\n';
  return out;
}

std::string start_mark_command() {
  // printf's octal escapes, in single quotes: every POSIX shell's printf.
  return "printf '\\036ddprun:" + std::string(kStartChannel) + "\\037\\n'";
}

void ChannelSplitter::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (c == '\r') continue;  // the remote terminal's "\r\n"
    switch (state_) {
      case State::kPayload:
        if (c == '\n') {
          sink_(channel_, payload_);
          payload_.clear();
          state_ = State::kText;
        } else {
          payload_ += c;
        }
        continue;
      case State::kChannel:
        if (c == kEndOfChannel) {
          state_ = State::kPayload;
          continue;
        }
        if (c == '\n' || channel_.size() == kMaxChannel) {
          text_.append(kMark).append(channel_);  // not ours after all
          state_ = State::kText;
          break;  // c is text
        }
        channel_ += c;
        continue;
      case State::kText:
        break;
    }
    if (c == kMark[matched_]) {
      if (++matched_ == kMark.size()) {
        matched_ = 0;
        channel_.clear();
        state_ = State::kChannel;
      }
      continue;
    }
    if (matched_ > 0) {
      text_.append(kMark.substr(0, matched_));
      matched_ = c == kMark[0] ? 1 : 0;  // the mark's first byte occurs in it once
      if (matched_ == 1) continue;
    }
    if (c == '\n') {
      sink_("", text_);
      text_.clear();
    } else {
      text_ += c;
    }
  }
}

void ChannelSplitter::finish() {
  if (state_ == State::kPayload && !payload_.empty()) sink_(channel_, payload_);
  if (state_ == State::kChannel) text_.append(kMark).append(channel_);
  text_.append(kMark.substr(0, matched_));
  if (!text_.empty()) sink_("", text_);
  state_ = State::kText;
  matched_ = 0;
  text_.clear();
  payload_.clear();
}

StderrChannel::StderrChannel() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return;
  if (::pipe2(wake_, O_CLOEXEC) != 0) {
    ::close(p[0]);
    ::close(p[1]);
    wake_[0] = wake_[1] = -1;
    return;
  }
  terminal_ = ::fcntl(2, F_DUPFD_CLOEXEC, 3);
  // dup2 leaves fd 2 inheritable: workers and helpers write into the pipe too.
  if (terminal_ < 0 || ::dup2(p[1], 2) < 0) {
    for (int fd : {p[0], p[1], wake_[0], wake_[1], terminal_}) {
      if (fd >= 0) ::close(fd);
    }
    terminal_ = wake_[0] = wake_[1] = -1;
    return;
  }
  ::close(p[1]);
  read_ = p[0];
  // Signals go to the agent's threads, never to the pump (it has no handler).
  sigset_t all;
  sigset_t old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  pump_ = std::thread([this] { pump(); });
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

StderrChannel::~StderrChannel() { close(); }

void StderrChannel::send(std::string_view channel, std::string_view payload) const {
  write_all(terminal_ >= 0 ? terminal_ : 2, channel_line(channel, payload));
}

void StderrChannel::close() {
  if (!pump_.joinable()) return;
  std::fflush(stderr);
  // Our last reference to the pipe goes; helpers still holding it (a worker
  // the agent could not stop) must not keep this process from exiting, so the
  // pump copies what is there now and stops.
  ::dup2(terminal_, 2);
  write_all(wake_[1], "x");
  pump_.join();
  for (int fd : {read_, wake_[0], wake_[1], terminal_}) ::close(fd);
  read_ = terminal_ = wake_[0] = wake_[1] = -1;
}

void StderrChannel::pump() {
  std::string line;
  char buf[8192];
  bool stopping = false;
  for (;;) {
    if (!stopping) {
      pollfd fds[2] = {{read_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[1].revents != 0) {
        stopping = true;
        ::fcntl(read_, F_SETFL, ::fcntl(read_, F_GETFL) | O_NONBLOCK);
      }
    }
    const ssize_t n = ::read(read_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // every writer gone, or, stopping, nothing more
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == '\n' || line.size() == kMaxLine) {
        send(kStderrChannel, line);
        line.clear();
      }
      if (buf[i] != '\n') line += buf[i];
    }
  }
  if (!line.empty()) send(kStderrChannel, line);
}

}  // namespace ddp::launcher
