// Where one worker's output goes: whole lines to the console prefixed
// "[rank N]:" (unless redirected or filtered out), raw bytes to its log files,
// and the last lines of stderr kept for the failure report.
//
// Thread-safety: used from the agent's io thread only.
#pragma once

#include <cstddef>
#include <deque>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "process_runner.hpp"

namespace ddp::agent {

struct WorkerOutputOptions {
  int rank = 0;
  bool console_out = true;           // stdout lines reach the agent's stdout
  bool console_err = true;           // stderr lines reach the agent's stderr
  std::filesystem::path out_file;    // empty: stdout not logged to a file
  std::filesystem::path err_file;    // empty: stderr not logged to a file
  std::size_t tail_lines = 10;       // stderr lines kept for the failure report
  int console_out_fd = 1;
  int console_err_fd = 2;
};

class WorkerOutput {
 public:
  // Opens the log files (creating parent directories). Throws ConfigError when
  // a log file cannot be created, naming the path and errno text.
  explicit WorkerOutput(WorkerOutputOptions options);
  ~WorkerOutput();
  WorkerOutput(const WorkerOutput&) = delete;
  WorkerOutput& operator=(const WorkerOutput&) = delete;

  void feed(StdStream stream, std::string_view bytes);
  // Emits a last line that had no newline. Call once the worker's pipes closed.
  void finish();
  const std::deque<std::string>& stderr_tail() const { return tail_; }

 private:
  struct Channel {
    std::string partial;
    int file_fd = -1;
    bool console = true;
    int console_fd = 1;
  };
  void emit_line(Channel& ch, StdStream stream, std::string_view line);
  Channel& channel(StdStream s) { return s == StdStream::kOut ? out_ : err_; }

  WorkerOutputOptions options_;
  std::string prefix_;
  Channel out_;
  Channel err_;
  std::deque<std::string> tail_;
};

// Writes all of `bytes` to `fd`, retrying on EINTR and short writes.
void write_fully(int fd, std::string_view bytes);

}  // namespace ddp::agent
