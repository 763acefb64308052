// Logging: libraries take a named logger; only main() configures output.
//
// Loggers made here start at level `warn` so that a training binary linking the
// SDK stays quiet unless it (or DDP_LOG_LEVEL) asks for more.
#pragma once

#include <spdlog/logger.h>

#include <functional>
#include <memory>
#include <string>

namespace ddp::log {

// Returns the logger called `name` ("agent", "rdzv", "store.server", "sdk", ...),
// creating it on first use. Thread-safe.
std::shared_ptr<spdlog::logger> get(const std::string& name);

// For main(): sets the level of every ddp logger (trace|debug|info|warn|error|off)
// and the output format. Under systemd (JOURNAL_STREAM set) the timestamp is
// dropped because journald adds its own. Throws ConfigError on a bad level name.
void setup(const std::string& level, const std::string& program_name);

// For main(): log lines go to the file at `path` (appended, created 0640)
// instead of stderr. Throws ConfigError naming `flag` when it cannot be opened.
void log_to_file(const std::string& path, const std::string& flag);
// Opens the log file again under the same name (after logrotate moved it:
// its postrotate sends SIGHUP). On failure the old file stays in use and the
// error is returned ("" on success). Thread-safe; a no-op without a log file.
std::string reopen_log_file();

// A live status line at the bottom of a terminal (ddprun's "waiting for
// nodes" while a rendezvous waits): for main() to enable, and only when stderr
// is a terminal. While one is shown, every log line first erases it and then
// redraws it below itself, so the two never mix. Thread-safe.
void enable_status_line();
// Shows `text` in place of the current status line (cut to the terminal's
// width); an empty `text` erases it. Returns false, doing nothing, when status
// lines are not enabled: the caller then logs the line instead.
bool set_status_line(const std::string& text);

// For a server's event loop thread: calls `run` (an io_context's run()) until
// it returns. An exception it lets out is a bug in a handler, which contains
// its own failures: it is logged on `logger` as "`loop` loop handler failed;
// loop goes on" and `run` is called again, so that one bad handler never ends
// the thread (std::terminate) nor leaves a loop that serves no one.
void run_surviving(const std::function<void()>& run, const std::string& logger, const std::string& loop);

// Parses a level name; throws ConfigError naming `flag` on a bad one.
spdlog::level::level_enum parse_level(const std::string& level, const std::string& flag);

}  // namespace ddp::log
