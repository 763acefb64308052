// A worker's stdin, stdout and stderr as the process runner sets them up:
// pipes (the default), or pseudo-terminals when the agent's own output is a
// terminal, so that a worker sees a terminal where torchrun's would.
//
// Thread-safety: plain data and free functions.
#pragma once

#include <sys/ioctl.h>

#include <optional>
#include <string>

namespace ddp::agent {

enum class StdStream : int { kOut = 1, kErr = 2 };

// File descriptors handed to ProcessRunner::spawn, which owns them from then
// on: it closes the child's ends once the child has its copies, and reads the
// agent's ends until EOF (or EIO, a pseudo-terminal's end of output).
struct WorkerStdio {
  static constexpr int kInherit = -2;  // the agent's own stdin
  static constexpr int kNull = -1;     // /dev/null
  int in = kInherit;                   // or the read end of a pipe the agent writes to
  // -1: the runner makes a pipe. Otherwise the agent's read end and the
  // child's write end (a pseudo-terminal's master and slave).
  int out_read = -1;
  int out_write = -1;
  int err_read = -1;
  int err_write = -1;
  // 0, 1 or 2: that stream is a pseudo-terminal the agent opened, to be the
  // controlling terminal of a worker in a session of its own; -1: none.
  int terminal = -1;
};

// What a worker gets of the terminal, decided before its output is set up.
struct WorkerTerminal {
  bool out_pty = false;         // stdout is a pseudo-terminal (the console's is a terminal)
  bool err_pty = false;         // stderr likewise
  bool reads_terminal = false;  // stdin is the relay from the agent's terminal
  bool null_stdin = false;      // stdin is /dev/null (the agent's stdin is a terminal)
  int out_master = -1;          // the agent's ends, for window size changes
  int err_master = -1;
  bool in_pty = false;  // stdin is a pseudo-terminal (reads_terminal, with out_master)
  // Which stdio stream is the controlling terminal of the worker's session
  // (the kernel then signals SIGWINCH itself), -1: none.
  int controlling = -1;
  // Columns the console line prefix takes: the worker's window is that much
  // narrower than the agent's terminal, so a line the worker fits to its width
  // (a progress bar) still fits once prefixed, and '\r' redraws it in place.
  int prefix_cols = 0;
};

// The window size of `fd` if it is a terminal.
std::optional<struct winsize> terminal_size(int fd);

// Columns `text` takes on a terminal: one per UTF-8 character (wide
// characters and escape sequences in a prefix are not expected).
int display_columns(const std::string& text);

// The window a worker's pseudo-terminal gets: the agent's terminal less
// `prefix_cols` columns, at least one column wide (a terminal of unknown
// size, 0 columns, stays unknown).
struct winsize worker_window(const struct winsize& terminal, int prefix_cols);

// Opens a pseudo-terminal pair for one output stream of a worker, sized
// `size`, both ends close-on-exec. '\n' stays '\n' on the way through (no
// ONLCR), so the agent sees exactly what the worker wrote. Returns false and
// sets `error` (with errno text) when no pseudo-terminal can be had.
bool open_output_pty(const struct winsize& size, int& master, int& slave, std::string& error);

// Gives every pseudo-terminal in `stdio` the size `size` (after SIGWINCH).
void resize_ptys(int out_master, int err_master, const struct winsize& size);

}  // namespace ddp::agent
