// The failure report: which worker failed first (the root cause) and how,
// then every other failure one line each. Rendered as one screen of text for
// the console and as JSON next to the logs. Pure, unit-tested.
#pragma once

#include <chrono>
#include <cstdint>
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
  // extraInfo.error_type: the exception's type as ddp::run writes it
  // ("ddp::MembershipChanged"); empty in torch's files.
  std::string error_type;
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
  std::string source;                    // "FileTimer", "heartbeat", "section", "straggler", "reform"
  std::string scope;                     // the timer's scope or the section; empty for the heartbeat
  std::string detail;                    // "set to expire after 2.0 s", "no heartbeat for 5.0 s"
  std::vector<std::string> top_frames;   // of its stack, innermost first ("file:line in fn")
  std::string stacks_file;               // every local worker's stacks, when collected
  std::string stack_note;                // why there are no frames, when there are none
  std::vector<std::string> other_ranks;  // "[rank 0] waiting in: file:line in fn"
  // The culprit rule (docs/agent-diagnosis.md, "Who hung"): what the other local ranks
  // wait for ("ranks 0, 2–7 wait in all_reduce #1234 for rank 1"), and, when
  // the deadline that passed was another rank's (one waiting for this one),
  // that rank and how the two were told apart.
  std::string waiting;
  int missed_rank = -1;  // the rank whose deadline passed; -1: this one's own
  std::string culprit_rule;
  // What its liveness reports say beside the hang: "it still heartbeats (the
  // latest 0.1 s ago), from a thread other than the stuck one", "it
  // heartbeat once, at its start, and never again".
  std::string liveness_note;
  // "FileTimer scope 'step' expired (set to expire after 2.0 s)"; for a
  // culprit named by the rule, "section 'step' expired on rank 0, which waits for it (...)".
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
  // The kernel's OOM killer ended it (its guard saw the kill counted in the
  // worker's memory cgroup): "memory peak 7.8 GiB", or "" with no peak known.
  bool oom_killed = false;
  std::string memory_peak;
  std::int64_t memory_peak_bytes = -1;

  // "exit code 1" or "signal SIGSEGV"; "killed by the kernel OOM killer
  // (memory peak 7.8 GiB)" after an OOM kill.
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

// A node's first failure of an attempt as it records it in the job's store
// (/<run>/agent/first_failure/<node_id>, docs/agent.md "Failure report"), so that
// every node, and the launcher of a --hosts job, can name the job's earliest
// failure by its own time rather than by whichever node reported first.
struct FailureRecord {
  std::string node;
  std::string host;
  std::int64_t round = 0;
  int rank = 0;
  std::int64_t time_unix_ms = 0;
  std::string failure;  // "rank 3 on node1: exit code 3 (CUDA out of memory)"
};
std::string encode_failure_record(const FailureRecord& r);
// Outside input (another node wrote it): nullopt for anything not a record.
std::optional<FailureRecord> decode_failure_record(const std::string& text);
// The earliest record of round `round` (of any round when `round` < 0).
std::optional<FailureRecord> first_failure(const std::vector<FailureRecord>& records, std::int64_t round);
// "2026-12-04 21:07:01.106" (local time), as the report prints times.
std::string failure_time_text(std::int64_t time_unix_ms);

}  // namespace ddp::agent
