// What workers get of the agent's terminal, as under torchrun where they share
// it: pseudo-terminals for the output streams whose console is a terminal
// (isatty, window size, SIGWINCH), and the terminal's input for one worker.
//
// Thread-safety: the io thread only.
#pragma once

#include <sys/ioctl.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <functional>
#include <memory>

#include "ddp/agent/agent_config.hpp"
#include "terminal_relay.hpp"
#include "worker_output.hpp"
#include "worker_stdio.hpp"

namespace spdlog {
class logger;
}

namespace ddp::agent {

class AgentTerminal {
 public:
  AgentTerminal(boost::asio::io_context& io, const AgentConfig& cfg, std::shared_ptr<spdlog::logger> log);
  ~AgentTerminal();
  AgentTerminal(const AgentTerminal&) = delete;
  AgentTerminal& operator=(const AgentTerminal&) = delete;

  // Starts relaying; `resized` runs on every window size change of the
  // agent's terminal, with the new size, for the workers' ptys to follow.
  void open(std::function<void(const winsize&)> resized);
  // Which of local rank's streams get a pty and whether it reads the terminal;
  // sets the matching streaming options in `out`.
  WorkerTerminal plan(int local_rank, WorkerOutputOptions& out);
  // Opens the ptys and the stdin relay `t` asks for (and records the masters in
  // it). A worker reading the terminal whose stdout is a pty gets a pty as
  // stdin too (readline works), whose echo goes to `echo`; otherwise a pipe.
  WorkerStdio open_stdio(int local_rank, WorkerTerminal& t, std::function<void(std::string_view)> echo);
  // A worker waiting at a prompt reads EOF (the workers are being stopped).
  void close_input();

 private:
  void on_window_change();

  boost::asio::io_context& io_;
  const AgentConfig& cfg_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<TerminalRelay> relay_;
  std::unique_ptr<boost::asio::signal_set> winch_;  // SIGWINCH, when workers have ptys
  std::function<void(const winsize&)> resized_;
  std::shared_ptr<ConsoleLine> console_line_ = std::make_shared<ConsoleLine>();
  bool pty_warned_ = false;
  int reader_prefix_cols_ = 0;  // the prefix of the worker whose stdin is a pty
};

}  // namespace ddp::agent
