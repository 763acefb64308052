#include "worker_output.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>

#include "ddp/common/error.hpp"

namespace ddp::agent {
namespace {

// A "line" longer than this is emitted in pieces so a worker printing without
// newlines cannot grow the agent's memory without bound.
constexpr std::size_t kMaxLineBytes = 64 * 1024;

int open_log(const std::filesystem::path& path) {
  if (path.empty()) return -1;
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw ConfigError("--log_dir: cannot create " + path.string() + ": " + errno_text(errno));
  }
  return fd;
}

}  // namespace

void write_fully(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EAGAIN) {
      // A non-blocking console (shared with a parent that set O_NONBLOCK): wait.
      struct pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return;  // closed console or full disk: output is best effort, the run goes on
    }
  }
}

WorkerOutput::WorkerOutput(WorkerOutputOptions options)
    : options_(std::move(options)), prefix_("[rank " + std::to_string(options_.rank) + "]:") {
  out_.console = options_.console_out;
  out_.console_fd = options_.console_out_fd;
  err_.console = options_.console_err;
  err_.console_fd = options_.console_err_fd;
  out_.file_fd = open_log(options_.out_file);
  try {
    err_.file_fd = open_log(options_.err_file);
  } catch (...) {
    if (out_.file_fd >= 0) ::close(out_.file_fd);
    throw;
  }
}

WorkerOutput::~WorkerOutput() {
  if (out_.file_fd >= 0) ::close(out_.file_fd);
  if (err_.file_fd >= 0) ::close(err_.file_fd);
}

void WorkerOutput::feed(StdStream stream, std::string_view bytes) {
  Channel& ch = channel(stream);
  if (ch.file_fd >= 0) write_fully(ch.file_fd, bytes);
  while (!bytes.empty()) {
    const auto nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      ch.partial.append(bytes);
      if (ch.partial.size() >= kMaxLineBytes) {
        emit_line(ch, stream, ch.partial);
        ch.partial.clear();
      }
      return;
    }
    if (ch.partial.empty()) {
      emit_line(ch, stream, bytes.substr(0, nl));
    } else {
      ch.partial.append(bytes.substr(0, nl));
      emit_line(ch, stream, ch.partial);
      ch.partial.clear();
    }
    bytes.remove_prefix(nl + 1);
  }
}

void WorkerOutput::finish() {
  for (auto stream : {StdStream::kOut, StdStream::kErr}) {
    Channel& ch = channel(stream);
    if (!ch.partial.empty()) {
      emit_line(ch, stream, ch.partial);
      ch.partial.clear();
    }
  }
}

void WorkerOutput::emit_line(Channel& ch, StdStream stream, std::string_view line) {
  if (stream == StdStream::kErr && options_.tail_lines > 0) {
    tail_.emplace_back(line);
    if (tail_.size() > options_.tail_lines) tail_.pop_front();
  }
  if (!ch.console) return;
  std::string text;
  text.reserve(prefix_.size() + line.size() + 1);
  text.append(prefix_).append(line).push_back('\n');
  write_fully(ch.console_fd, text);
}

}  // namespace ddp::agent
