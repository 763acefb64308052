// Lets one worker read the terminal, as under torchrun: while the agent runs
// in the terminal's foreground, what the user types goes to that worker's
// stdin, so input(), breakpoint() and pdb work. The worker runs in its own
// process group, so it never touches the terminal itself: no SIGTTIN stop,
// and Ctrl-C reaches the agent, which stops every worker.
//
// Two ways, chosen per worker:
// * a pseudo-terminal (open_pty, when the worker's output is one too): its
//   stdin is a terminal, so readline works (line editing, history, tab
//   completion). The agent's terminal is put in non-canonical mode without
//   echo but keeps ISIG, so Ctrl-C, Ctrl-\ and Ctrl-Z still signal the agent;
//   every other key goes to the worker's pty as typed, and the pty, set up
//   with the terminal's own settings, edits and echoes the line (the echo is
//   handed to `echo`) unless the worker (readline) takes over. The terminal's
//   mode is restored when the worker's pty closes, and set again on SIGCONT
//   (after Ctrl-Z and fg).
// * a pipe (open_pipe): the terminal stays in its own (cooked) mode: line
//   editing and echo are the terminal's; the worker gets whole lines, and EOF
//   for Ctrl-D.
//
// Thread-safety: io thread only.
#pragma once

#include <sys/ioctl.h>
#include <termios.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "worker_output.hpp"

namespace ddp::agent {

class TerminalRelay {
 public:
  // Relays only when stdin is a terminal and the agent is in its foreground
  // process group; otherwise enabled() is false and nothing is opened.
  // `line`: typing Enter ends the console line a prompt left open (pipe mode).
  TerminalRelay(boost::asio::io_context& io, std::shared_ptr<ConsoleLine> line);
  ~TerminalRelay();  // restores the terminal's mode
  TerminalRelay(const TerminalRelay&) = delete;
  TerminalRelay& operator=(const TerminalRelay&) = delete;

  bool enabled() const { return tty_.is_open(); }

  // A fresh pipe for the next worker that reads the terminal: returns its read
  // end (for WorkerStdio::in), or -1 with `error` set. Replaces (closes) the
  // previous worker's pipe or pty.
  int open_pipe(std::string& error);
  // A fresh pseudo-terminal, sized `size`, for the next worker that reads the
  // terminal: returns the worker's end (for WorkerStdio::in), or -1 with
  // `error` set. What the pty echoes goes to `echo`. Replaces the previous
  // worker's pipe or pty.
  int open_pty(const struct winsize& size, std::function<void(std::string_view)> echo, std::string& error);
  // The worker's pty follows the terminal's size (readline wraps by it).
  void resize(const struct winsize& size);
  // Closes the worker's end of the relay: its next read sees EOF. Used when the
  // workers are being stopped, so a worker waiting at a prompt exits too.
  void close_pipe();

 private:
  void wait_readable();
  void on_readable();
  void wait_echo();
  void on_echo();
  void enter_raw(bool again);
  void leave_raw();
  void wait_continued();

  boost::asio::posix::stream_descriptor tty_;
  boost::asio::posix::stream_descriptor pty_;  // the reader's pty master, when it has one
  boost::asio::steady_timer retry_;
  std::unique_ptr<boost::asio::signal_set> continued_;  // SIGCONT: set the mode again after fg
  std::shared_ptr<ConsoleLine> line_;
  std::function<void(std::string_view)> echo_;
  struct termios saved_ {};  // the terminal's mode when the agent started
  bool have_saved_ = false;
  bool raw_ = false;     // the agent set the terminal's mode (and restores it)
  int pipe_write_ = -1;  // where typed bytes go: the pipe, or the pty master (owned by pty_)
  bool waiting_ = false;
};

}  // namespace ddp::agent
