// Where one worker's output goes: to the console prefixed "[rank N]:" (unless
// redirected or filtered out), raw bytes to its log files, and the last lines
// of stderr kept for the failure report.
//
// The console gets whole lines, or, in streaming mode (the console is a
// terminal, or the worker answers a prompt), bytes as they arrive: the prefix
// goes before the text of each line and of each redraw after '\r', so a
// progress bar redrawn with '\r' keeps its prefix, and a prompt without a
// newline shows at once. Another writer first ends an unfinished line with
// '\n', so lines never merge; a writer that then redraws its line ('\r', as
// progress bars do) redraws it in place (console_line.hpp).
//
// Thread-safety: used from the agent's io thread only.
#pragma once

#include <cstddef>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "console_line.hpp"
#include "worker_stdio.hpp"

namespace ddp::agent {

class SharedLog;

struct WorkerOutputOptions {
  int rank = 0;
  std::optional<std::string> prefix;  // console line prefix; nullopt: "[rank N]:"
  // The prefix the console shows: `prefix`, or "[rank N]:".
  std::string console_prefix() const { return prefix.value_or("[rank " + std::to_string(rank) + "]:"); }
  bool console_out = true;         // stdout lines reach the agent's stdout
  bool console_err = true;         // stderr lines reach the agent's stderr
  std::filesystem::path out_file;  // empty: stdout not logged to a file
  std::filesystem::path err_file;  // empty: stderr not logged to a file
  bool append_files = false;       // after what the files hold (a replacement's); else truncated
  std::size_t tail_lines = 10;     // stderr lines kept for the failure report
  int console_out_fd = 1;
  int console_err_fd = 2;
  bool stream_out = false;                    // stdout's console gets bytes as they come
  bool stream_err = false;                    // stderr's likewise
  std::shared_ptr<ConsoleLine> console_line;  // null: this output's own
  // torchrun's --duplicate_std*_filters: a line holding any of the words also
  // goes, prefixed, to the fd (shared by the group's workers, O_APPEND).
  std::vector<std::string> out_filters;
  std::vector<std::string> err_filters;
  std::shared_ptr<SharedLog> filtered_out;
  std::shared_ptr<SharedLog> filtered_err;
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
  // What the worker's stdin pty echoes of the user's typing: to the console as
  // the worker's own streamed output, continuing whichever of its streams left
  // the line open (input() prompts on stderr), but not to its log files.
  void echo(std::string_view bytes);
  // Emits a last line that had no newline. Call once the worker's pipes closed.
  void finish();
  const std::deque<std::string>& stderr_tail() const { return tail_; }

 private:
  struct Channel {
    std::string partial;
    int file_fd = -1;
    bool console = true;
    int console_fd = 1;
    bool stream = false;
    bool at_line_start = true;   // streaming: the next byte starts a line
    bool line_prefixed = false;  // streaming: the screen line shows the prefix (after "text\r")
  };
  // The console text for streamed `bytes`, starting from the flags given
  // (updated): the prefix before the text of each line and each redraw.
  std::string render(std::string_view bytes, bool& at_line_start, bool& line_prefixed) const;
  // `line` without the "[rankN]: " torch 2.x's excepthook puts before each
  // line of a traceback once the process group is up (N: this worker's rank).
  std::string_view without_torch_prefix(std::string_view line) const;
  void emit_line(Channel& ch, StdStream stream, std::string_view line);
  void stream_console(Channel& ch, std::string_view bytes);
  // Redraws `ch`'s row above the cursor with `bytes` ('\r' first); false
  // when it cannot be done in place (the row is then no longer its).
  bool redraw_in_place(Channel& ch, std::string_view& bytes);
  // Ends another writer's unfinished line at the cursor, so that `ch`'s text
  // starts a row; `ch` itself starts one when it lost its row.
  void end_foreign_line(Channel& ch);
  Channel& channel(StdStream s) { return s == StdStream::kOut ? out_ : err_; }

  WorkerOutputOptions options_;
  std::string prefix_;
  std::string torch_prefix_;  // "[rankN]: "
  Channel out_;
  Channel err_;
  std::deque<std::string> tail_;
};

// A console line prefix from torchrun's template syntax: ${rank},
// ${local_rank} and ${role_name} replaced, anything else kept as written.
std::string expand_prefix(const std::string& templ, int rank, int local_rank, const std::string& role);

// A log file every worker of an attempt writes to (the filtered lines):
// opened with O_APPEND so each line lands whole, closed with the last owner.
class SharedLog {
 public:
  // Creates the parent directories and the file (truncated). Throws ConfigError
  // naming the path, as the per-worker logs do.
  explicit SharedLog(const std::filesystem::path& path);
  ~SharedLog();
  SharedLog(const SharedLog&) = delete;
  SharedLog& operator=(const SharedLog&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

// Writes all of `bytes` to `fd`, retrying on EINTR and short writes.
void write_fully(int fd, std::string_view bytes);

}  // namespace ddp::agent
