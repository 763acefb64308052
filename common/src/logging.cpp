#include "ddp/common/logging.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "ddp/common/error.hpp"

namespace ddp::log {
namespace {

std::mutex g_mutex;
bool g_configured = false;
spdlog::level::level_enum g_level = spdlog::level::warn;
std::string g_pattern = "[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v";

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
  static StatusLine s;
  return s;
}

// stderr, erasing the status line before a log line and redrawing it after.
class StderrSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    auto& st = status();
    std::lock_guard<std::mutex> lock(st.mu);  // the formatter too is used by one thread at a time
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    st.erase();
    std::fwrite(line.data(), 1, line.size(), stderr);
    st.draw();
  }
  void flush_() override {
    std::lock_guard<std::mutex> lock(status().mu);
    std::fflush(stderr);
  }
};

}  // namespace

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
  st.text = text.substr(0, width);
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
