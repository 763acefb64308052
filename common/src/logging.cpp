#include "ddp/common/logging.hpp"

#include <fcntl.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "ddp/common/error.hpp"
#include "ddp/common/printable.hpp"

namespace ddp::log {
namespace {

// What a thread may read while the process exits is never destroyed: a
// detached rendezvous keep-alive can hold a store client whose I/O thread
// still creates a logger or logs then (docs/rendezvous.md), and a static
// destroyed under it is a race (TSan) or a use after free.
std::mutex g_mutex;
bool g_configured = false;
spdlog::level::level_enum g_level = spdlog::level::warn;
std::string& g_pattern = *new std::string("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
std::string& g_program = *new std::string();

spdlog::level::level_enum initial_level() {
  // Training binaries can turn SDK logging up without code changes.
  if (const char* env = std::getenv("DDP_LOG_LEVEL"); env != nullptr && *env != '\0') {
    try {
      return parse_level(env, "DDP_LOG_LEVEL");
    } catch (const ConfigError&) {
    }
  }
  return spdlog::level::warn;
}

// The status line, shared by every logger's sink: one mutex orders log lines
// and status updates on stderr.
struct StatusLine {
  std::mutex mu;
  bool enabled = false;
  std::string text;  // shown when non-empty
  // Where log lines go: stderr, or the --log-file (status lines never go there).
  std::FILE* out = stderr;
  std::string out_path;

  // With `mu` held.
  void erase() {
    if (!text.empty()) std::fputs("\r\x1b[K", stderr);
  }
  void draw() {
    if (text.empty()) return;
    std::fputs("\r\x1b[K", stderr);
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
  }
};

StatusLine& status() {
  static StatusLine& s = *new StatusLine;  // never destroyed, as g_pattern
  return s;
}

// stderr, erasing the status line before a log line and redrawing it after.
class StderrSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    auto& st = status();
    std::lock_guard<std::mutex> lock(st.mu);  // the formatter too is used by one thread at a time
    spdlog::memory_buf_t line;
    // A log line may quote outside text (a health check's stderr, a store
    // key, a peer's reason): what a terminal would act on is shown escaped,
    // in a log file too (it is read on a terminal).
    const std::string_view payload(msg.payload.data(), msg.payload.size());
    if (needs_escape(payload)) {
      const std::string safe = printable(payload, Newlines::kKeep);
      spdlog::details::log_msg escaped = msg;
      escaped.payload = spdlog::string_view_t(safe.data(), safe.size());
      formatter_->format(escaped, line);
    } else {
      formatter_->format(msg, line);
    }
    if (st.out != stderr) {
      std::fwrite(line.data(), 1, line.size(), st.out);
      return;
    }
    st.erase();
    std::fwrite(line.data(), 1, line.size(), stderr);
    st.draw();
  }
  void flush_() override {
    std::lock_guard<std::mutex> lock(status().mu);
    std::fflush(status().out);
  }
};

}  // namespace

namespace {

std::FILE* open_log(const std::string& path, std::string& error) {
  // O_APPEND: several writers (and logrotate's copytruncate) never overwrite
  // each other; close-on-exec: no child inherits it.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  std::FILE* f = fd < 0 ? nullptr : ::fdopen(fd, "a");
  if (f == nullptr) {
    error = errno_text(errno);
    if (fd >= 0) ::close(fd);
  }
  return f;
}

}  // namespace

void log_to_file(const std::string& path, const std::string& flag) {
  std::string error;
  std::FILE* f = open_log(path, error);
  if (f == nullptr) throw ConfigError(flag + " " + path + ": cannot open: " + error);
  std::setvbuf(f, nullptr, _IOLBF, 0);
  auto& st = status();
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (st.out != stderr) std::fclose(st.out);
    st.out = f;
    st.out_path = path;
  }
  // A file has no journald to timestamp its lines.
  std::lock_guard<std::mutex> lock(g_mutex);
  g_pattern = "[%Y-%m-%d %H:%M:%S.%e] " + g_program + " [%n] [%l] %v";
  spdlog::apply_all([&](const std::shared_ptr<spdlog::logger>& l) { l->set_pattern(g_pattern); });
}

std::string reopen_log_file() {
  auto& st = status();
  std::string path;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (st.out == stderr) return "";
    path = st.out_path;
  }
  std::string error;
  std::FILE* f = open_log(path, error);
  if (f == nullptr) return path + ": cannot open: " + error;
  std::setvbuf(f, nullptr, _IOLBF, 0);
  std::lock_guard<std::mutex> lock(st.mu);
  std::fclose(st.out);
  st.out = f;
  return "";
}

void enable_status_line() {
  auto& st = status();
  std::lock_guard<std::mutex> lock(st.mu);
  st.enabled = true;
}

bool set_status_line(const std::string& text) {
  auto& st = status();
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.enabled) return false;
  winsize ws{};
  const std::size_t width =
      ::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 ? ws.ws_col - 1 : 79;
  if (text.empty()) {
    st.erase();
    std::fflush(stderr);
  }
  st.text = terminal_safe(text).substr(0, width);  // names from the store may be in it
  st.draw();
  return true;
}

spdlog::level::level_enum parse_level(const std::string& level, const std::string& flag) {
  static const std::vector<std::pair<std::string, spdlog::level::level_enum>> kLevels = {
      {"trace", spdlog::level::trace},       {"debug", spdlog::level::debug},  {"info", spdlog::level::info},
      {"warn", spdlog::level::warn},         {"warning", spdlog::level::warn}, {"error", spdlog::level::err},
      {"critical", spdlog::level::critical}, {"off", spdlog::level::off}};
  for (const auto& [name, value] : kLevels) {
    if (name == level) return value;
  }
  throw ConfigError(flag + ": unknown log level '" + level +
                    "'; use one of trace, debug, info, warn, error, off");
}

std::shared_ptr<spdlog::logger> get(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto existing = spdlog::get(name)) return existing;
  // stderr, so that programs keep their stdout for their own output.
  auto logger = std::make_shared<spdlog::logger>(name, std::make_shared<StderrSink>());
  logger->set_level(g_configured ? g_level : initial_level());
  logger->set_pattern(g_pattern);
  logger->flush_on(spdlog::level::warn);
  spdlog::register_logger(logger);
  return logger;
}

void setup(const std::string& level, const std::string& program_name) {
  auto parsed = parse_level(level, "--log-level");
  std::lock_guard<std::mutex> lock(g_mutex);
  g_configured = true;
  g_level = parsed;
  g_program = program_name;
  // journald timestamps every line itself.
  const bool journal = std::getenv("JOURNAL_STREAM") != nullptr;
  g_pattern = journal ? "[%n] [%l] %v" : "[%Y-%m-%d %H:%M:%S.%e] " + program_name + " [%n] [%l] %v";
  spdlog::apply_all([&](const std::shared_ptr<spdlog::logger>& l) {
    l->set_level(g_level);
    l->set_pattern(g_pattern);
  });
}

void run_surviving(const std::function<void()>& run, const std::string& logger, const std::string& loop) {
  while (true) {
    try {
      run();
      return;
    } catch (const std::exception& e) {
      get(logger)->error("{} loop handler failed; loop goes on error=\"{}\"", loop, e.what());
    } catch (...) {
      get(logger)->error("{} loop handler failed with a non-standard exception; loop goes on", loop);
    }
  }
}

}  // namespace ddp::log
