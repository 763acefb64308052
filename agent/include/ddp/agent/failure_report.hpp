// The failure report: which worker failed first (the root cause) and how,
// then every other failure one line each. Rendered as one screen of text for
// the console and as JSON next to the logs. Pure, unit-tested.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace ddp::agent {

// What a worker wrote to TORCHELASTIC_ERROR_FILE (torch's @record format, or
// the plain {"message": "..."} form).
struct ErrorFileContent {
  std::string message;
  std::string traceback;  // extraInfo.py_callstack
  std::string timestamp;  // extraInfo.timestamp, seconds since the epoch as text
};

// What became of a worker's error file: its content, or why a file that
// exists was not used. The worker wrote it, so it is outside input
// (json_input::kErrorFile bounds it): a hostile file costs its own message,
// never the agent.
struct ErrorFileRead {
  std::optional<ErrorFileContent> content;
  // "it nests 100001 levels deep; at most 64 are read", "it is not valid JSON: ...",
  // "it holds no \"message\""; empty when the file is used or does not exist.
  std::string problem;
};
ErrorFileRead read_error_file(const std::filesystem::path& path);

// "SIGSEGV" for 11; "SIG<n>" for a number without a name.
std::string signal_name(int sig);

// "exit code 3" or "SIGKILL" for a wait status.
std::string describe_wait_status(int status);

// Why ddprun killed a worker it found hung, and where its code was.
struct HangInfo {
  std::string source;                    // "FileTimer", "heartbeat", "section", "straggler"
  std::string scope;                     // the timer's scope or the section; empty for the heartbeat
  std::string detail;                    // "set to expire after 2.0 s", "no heartbeat for 5.0 s"
  std::vector<std::string> top_frames;   // of its stack, innermost first ("file:line in fn")
  std::string stacks_file;               // every local worker's stacks, when collected
  std::string stack_note;                // why there are no frames, when there are none
  std::vector<std::string> other_ranks;  // "[rank 0] waiting in: file:line in fn"
  // "FileTimer scope 'step' expired (set to expire after 2.0 s)"
  std::string what() const;
};

struct WorkerFailure {
  std::string host;
  int rank = 0;
  int local_rank = 0;
  int pid = 0;
  int exit_code = 0;  // when the worker exited
  int signal = 0;     // when a signal killed it (exit_code is then 128+signal in summaries)
  std::chrono::system_clock::time_point time;  // when the agent saw it end
  std::string error_file;
  std::optional<ErrorFileContent> error;
  std::string error_file_problem;  // why error_file, which exists, gave no `error`
  std::vector<std::string> stderr_tail;
  std::string stderr_log;        // path of its stderr log file, if any
  std::optional<HangInfo> hang;  // set when ddprun killed it for hanging

  // "exit code 1" or "signal SIGSEGV".
  std::string how() const;
};

struct FailureReport {
  std::string run_id;
  std::string role;
  int attempt = 0;
  int restart_count = 0;
  int max_restarts = 0;
  std::vector<WorkerFailure> failures;  // any order; root cause = earliest time

  // Index of the earliest failure; requires non-empty failures.
  std::size_t root_cause() const;
};

std::string render_text(const FailureReport& report);

// When a worker run by a Python interpreter failed on an import
// (ModuleNotFoundError/ImportError in its stderr), one line naming the
// interpreter and how to choose another; otherwise "".
std::string interpreter_hint(const FailureReport& report, const std::string& program);
std::string render_json(const FailureReport& report);

}  // namespace ddp::agent
