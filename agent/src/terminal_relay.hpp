// Lets one worker read the terminal, as under torchrun: while the agent runs
// in the terminal's foreground, what the user types goes to that worker's
// stdin (a pipe), so input(), breakpoint() and pdb work. The worker runs in
// its own process group, so it never touches the terminal itself: no SIGTTIN
// stop, and Ctrl-C reaches the agent, which stops every worker.
//
// The terminal stays in its own (cooked) mode: line editing and echo are the
// terminal's; the worker gets whole lines, and EOF for Ctrl-D.
//
// Thread-safety: io thread only.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <string>

#include "worker_output.hpp"

namespace ddp::agent {

class TerminalRelay {
 public:
  // Relays only when stdin is a terminal and the agent is in its foreground
  // process group; otherwise enabled() is false and nothing is opened.
  // `line`: typing Enter ends the console line a prompt left open.
  TerminalRelay(boost::asio::io_context& io, std::shared_ptr<ConsoleLine> line);
  ~TerminalRelay();
  TerminalRelay(const TerminalRelay&) = delete;
  TerminalRelay& operator=(const TerminalRelay&) = delete;

  bool enabled() const { return tty_.is_open(); }

  // A fresh pipe for the next worker that reads the terminal: returns its read
  // end (for WorkerStdio::in), or -1 with `error` set. Replaces (closes) the
  // previous worker's pipe.
  int open_pipe(std::string& error);
  // Closes the worker's end of the relay: its next read sees EOF. Used when the
  // workers are being stopped, so a worker waiting at a prompt exits too.
  void close_pipe();

 private:
  void wait_readable();
  void on_readable();

  boost::asio::posix::stream_descriptor tty_;
  boost::asio::steady_timer retry_;
  std::shared_ptr<ConsoleLine> line_;
  int pipe_write_ = -1;
  bool waiting_ = false;
};

}  // namespace ddp::agent
