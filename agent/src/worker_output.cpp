#include "worker_output.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "ddp/common/error.hpp"

namespace ddp::agent {
namespace {

int open_log(const std::filesystem::path& path, bool append) {
  if (path.empty()) return -1;
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw ConfigError("--log_dir: cannot create " + path.string() + ": " + errno_text(errno));
  }
  return fd;
}

}  // namespace

SharedLog::SharedLog(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw ConfigError("--log_dir: cannot create " + path.string() + ": " + errno_text(errno));
}

SharedLog::~SharedLog() {
  if (fd_ >= 0) ::close(fd_);
}

std::string expand_prefix(const std::string& templ, int rank, int local_rank, const std::string& role) {
  const std::pair<std::string, std::string> vars[] = {{"${rank}", std::to_string(rank)},
                                                      {"${local_rank}", std::to_string(local_rank)},
                                                      {"${role_name}", role}};
  std::string out;
  for (std::size_t i = 0; i < templ.size();) {
    bool replaced = false;
    for (const auto& [name, value] : vars) {
      if (templ.compare(i, name.size(), name) == 0) {
        out += value;
        i += name.size();
        replaced = true;
        break;
      }
    }
    if (!replaced) out += templ[i++];
  }
  return out;
}

void write_fully(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EAGAIN) {
      // A non-blocking console (shared with a parent that set O_NONBLOCK): wait.
      struct pollfd p {
        fd, POLLOUT, 0
      };
      ::poll(&p, 1, 100);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return;  // closed console or full disk: output is best effort, the run goes on
    }
  }
}

WorkerOutput::WorkerOutput(WorkerOutputOptions options)
    : options_(std::move(options)),
      prefix_(options_.console_prefix()),
      torch_prefix_("[rank" + std::to_string(options_.rank) + "]: ") {
  if (!options_.console_line) options_.console_line = std::make_shared<ConsoleLine>();
  out_.console = options_.console_out;
  out_.console_fd = options_.console_out_fd;
  out_.stream = options_.stream_out;
  err_.stream = options_.stream_err;
  err_.console = options_.console_err;
  err_.console_fd = options_.console_err_fd;
  out_.file_fd = open_log(options_.out_file, options_.append_files);
  try {
    err_.file_fd = open_log(options_.err_file, options_.append_files);
  } catch (...) {
    if (out_.file_fd >= 0) ::close(out_.file_fd);
    throw;
  }
}

WorkerOutput::~WorkerOutput() {
  // The shared line must not point into a destroyed writer.
  options_.console_line->forget(&out_.at_line_start);
  options_.console_line->forget(&err_.at_line_start);
  if (out_.file_fd >= 0) ::close(out_.file_fd);
  if (err_.file_fd >= 0) ::close(err_.file_fd);
}

void WorkerOutput::feed(StdStream stream, std::string_view bytes) {
  Channel& ch = channel(stream);
  if (ch.file_fd >= 0) write_fully(ch.file_fd, bytes);
  if (ch.stream && ch.console) stream_console(ch, bytes);
  while (!bytes.empty()) {
    const auto nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      ch.partial.append(bytes);
      if (ch.stream) {
        // Kept for the stderr tail only: what a '\r' redraws is gone from the screen too.
        if (const auto cr = ch.partial.rfind('\r'); cr != std::string::npos) ch.partial.erase(0, cr + 1);
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

void WorkerOutput::echo(std::string_view bytes) {
  const bool* open_line = options_.console_line->at_line_start;
  Channel& ch = open_line == &err_.at_line_start && err_.stream && err_.console ? err_ : out_;
  if (ch.stream && ch.console) stream_console(ch, bytes);
}

void WorkerOutput::finish() {
  for (auto stream : {StdStream::kOut, StdStream::kErr}) {
    Channel& ch = channel(stream);
    if (!ch.partial.empty()) {
      emit_line(ch, stream, ch.partial);
      ch.partial.clear();
    }
    if (ch.stream && ch.console && !ch.at_line_start) {
      // A last line without newline: end it, so what follows starts a line.
      auto& line = *options_.console_line;
      if (line.at_line_start == &ch.at_line_start) {
        write_fully(ch.console_fd, "\n");
        line.advance("\n");
        line.at_line_start = nullptr;
      } else {
        line.release(&ch.at_line_start);  // a row above the cursor: it stays as it is
      }
      ch.at_line_start = true;
    }
  }
}

std::string_view WorkerOutput::without_torch_prefix(std::string_view line) const {
  if (line.substr(0, torch_prefix_.size()) == torch_prefix_) return line.substr(torch_prefix_.size());
  if (line.size() + 1 == torch_prefix_.size() && torch_prefix_.compare(0, line.size(), line) == 0) return {};
  return line;
}

void WorkerOutput::emit_line(Channel& ch, StdStream stream, std::string_view line) {
  // The report and the console prefix name the rank already (but
  // --no_prefix shows the lines as written).
  if (stream == StdStream::kErr && options_.tail_lines > 0) {
    tail_.emplace_back(without_torch_prefix(line));
    if (tail_.size() > options_.tail_lines) tail_.pop_front();
  }
  if (!prefix_.empty()) line = without_torch_prefix(line);
  const auto& filters = stream == StdStream::kOut ? options_.out_filters : options_.err_filters;
  const auto& filtered = stream == StdStream::kOut ? options_.filtered_out : options_.filtered_err;
  if (filtered && std::any_of(filters.begin(), filters.end(), [&](const std::string& word) {
        return line.find(word) != std::string_view::npos;
      })) {
    std::string text;
    text.append(prefix_).append(line).push_back('\n');
    write_fully(filtered->fd(), text);  // one write per line: O_APPEND keeps the workers' lines whole
  }
  if (!ch.console || ch.stream) return;
  end_foreign_line(ch);
  std::string text;
  text.reserve(prefix_.size() + line.size() + 1);
  text.append(prefix_).append(line).push_back('\n');
  write_fully(ch.console_fd, text);
  options_.console_line->advance(text);
}

void WorkerOutput::end_foreign_line(Channel& ch) {
  auto& line = *options_.console_line;
  bool* const me = &ch.at_line_start;
  if (line.at_line_start != nullptr && line.at_line_start != me) {
    write_fully(line.fd, "\n");
    line.end_line_keeping_owner();  // still its writer's: a redraw goes back to it
  }
  if (line.at_line_start != me && !ch.at_line_start) {
    // Its line is on a row above (or scrolled off): what it writes now, not
    // being a redraw of that row, starts a row of its own.
    line.release(me);
    ch.at_line_start = true;
    ch.line_prefixed = false;
  }
}

bool WorkerOutput::redraw_in_place(Channel& ch, std::string_view& bytes) {
  auto& line = *options_.console_line;
  bool* const me = &ch.at_line_start;
  if (line.at_line_start == me || !line.owns_row_above(me) || bytes.front() != '\r') return false;
  const auto nl = bytes.find('\n');
  bool at_start = ch.at_line_start, prefixed = ch.line_prefixed;
  const std::string text = render(bytes.substr(0, nl), at_start, prefixed);
  int widest = 0;
  for (std::size_t from = 0; from <= text.size();) {
    const auto cr = std::min(text.find('\r', from), text.size());
    widest = std::max(widest, ConsoleLine::columns(std::string_view(text).substr(from, cr - from)));
    from = cr + 1;
  }
  const int up = line.rows_up_to(me, widest);
  if (up == 0) return false;
  // Save the cursor, go up to the row, erase it, redraw, come back.
  write_fully(ch.console_fd,
              "\x1b"
              "7\x1b[" +
                  std::to_string(up) + "A\r\x1b[2K" + text +
                  "\x1b"
                  "8");
  ch.at_line_start = at_start;
  ch.line_prefixed = prefixed;
  if (nl == std::string_view::npos) {
    bytes = {};
  } else {
    line.release(me);  // its line is finished there
    ch.at_line_start = true;
    ch.line_prefixed = false;
    bytes.remove_prefix(nl + 1);
  }
  return true;
}

void WorkerOutput::stream_console(Channel& ch, std::string_view bytes) {
  if (bytes.empty()) return;
  auto& cut = *options_.console_line;
  if (bytes.front() == '\n' && cut.at_line_start != &ch.at_line_start && !ch.at_line_start) {
    // Its line was cut by another worker's output, which ended it with
    // '\n' already: its own '\n' (python -u writes it apart from the text)
    // is not an empty line of its own.
    cut.release(&ch.at_line_start);
    ch.at_line_start = true;
    ch.line_prefixed = false;
    return stream_console(ch, bytes.substr(1));
  }
  if (redraw_in_place(ch, bytes)) return stream_console(ch, bytes);
  end_foreign_line(ch);
  const std::string text = render(bytes, ch.at_line_start, ch.line_prefixed);
  write_fully(ch.console_fd, text);
  auto& line = *options_.console_line;
  line.advance(text);
  if (!ch.at_line_start) {
    line.fd = ch.console_fd;
    line.at_line_start = &ch.at_line_start;
  } else if (line.at_line_start == &ch.at_line_start) {
    line.at_line_start = nullptr;
    line.fd = -1;
  }
}

std::string WorkerOutput::render(std::string_view bytes, bool& at_line_start, bool& line_prefixed) const {
  std::string text;
  text.reserve(bytes.size() + prefix_.size() * 2);
  while (true) {
    const auto end = bytes.find_first_of("\r\n");
    auto chunk = bytes.substr(0, end);
    // torch 2.x's excepthook writes "[rank0]: " before each traceback line:
    // not twice a rank's name on one line.
    if (at_line_start && !prefix_.empty()) chunk = without_torch_prefix(chunk);
    // The prefix goes before text, not before a bare '\r' (tqdm starts with
    // one: "[rank 0]:\r[rank 0]:" would show the prefix twice where a line
    // wraps), nor before the '\n' of a "\r\n" ending a prefixed line. An
    // empty line ("\n" alone) is prefixed, as in whole-line mode.
    const bool empty_line = chunk.empty() && end != std::string_view::npos && bytes[end] == '\n';
    if (at_line_start && (!chunk.empty() || (empty_line && !line_prefixed))) {
      text.append(prefix_);
      line_prefixed = true;
    }
    text.append(chunk);
    if (!chunk.empty()) at_line_start = false;
    if (end == std::string_view::npos) break;
    text.push_back(bytes[end]);
    at_line_start = true;
    if (bytes[end] == '\n') line_prefixed = false;
    bytes.remove_prefix(end + 1);
  }
  return text;
}

}  // namespace ddp::agent
