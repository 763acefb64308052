// The worker that reads the terminal is local rank 0, or the first rank of
// --local_ranks_filter (the one whose output the user sees); the others get
// /dev/null as stdin when the agent's stdin is a terminal, and the agent's
// stdin otherwise (a pipe or file is shared, as under torchrun).
#include "agent_terminal.hpp"

#include <signal.h>
#include <unistd.h>

#include "ddp/common/logging.hpp"

namespace ddp::agent {

AgentTerminal::AgentTerminal(boost::asio::io_context& io, const AgentConfig& cfg,
                             std::shared_ptr<spdlog::logger> log)
    : io_(io), cfg_(cfg), log_(std::move(log)) {}

AgentTerminal::~AgentTerminal() = default;

void AgentTerminal::open(std::function<void(const winsize&)> resized) {
  resized_ = std::move(resized);
  relay_ = std::make_unique<TerminalRelay>(io_, console_line_);
  if (const auto size = terminal_size(1) ? terminal_size(1) : terminal_size(2)) {
    console_line_->set_size(size->ws_col, size->ws_row);
    winch_ = std::make_unique<boost::asio::signal_set>(io_, SIGWINCH);
    winch_->async_wait([this](boost::system::error_code ec, int) {
      if (ec) return;
      on_window_change();
    });
  }
}

WorkerTerminal AgentTerminal::plan(int local_rank, WorkerOutputOptions& out) {
  WorkerTerminal t;
  t.out_pty = out.console_out && terminal_size(out.console_out_fd).has_value();
  t.err_pty = out.console_err && terminal_size(out.console_err_fd).has_value();
  const int reader = cfg_.local_ranks_filter.empty() ? 0 : cfg_.local_ranks_filter.front();
  t.reads_terminal = relay_ && relay_->enabled() && local_rank == reader;
  t.null_stdin = !t.reads_terminal && ::isatty(0) != 0;
  t.prefix_cols = display_columns(out.console_prefix());
  // A prompt ("(Pdb) ") has no newline: the reader's output streams too.
  out.stream_out = t.out_pty || (t.reads_terminal && out.console_out);
  out.stream_err = t.err_pty || (t.reads_terminal && out.console_err);
  out.console_line = console_line_;
  return t;
}

WorkerStdio AgentTerminal::open_stdio(int local_rank, WorkerTerminal& t,
                                      std::function<void(std::string_view)> echo) {
  WorkerStdio stdio;
  std::string error;
  if (t.out_pty || t.err_pty) {
    const auto size = worker_window(terminal_size(t.out_pty ? 1 : 2).value_or(winsize{}), t.prefix_cols);
    if (t.out_pty && open_output_pty(size, stdio.out_read, stdio.out_write, error)) {
      t.out_master = stdio.out_read;
    }
    if (error.empty() && t.err_pty && open_output_pty(size, stdio.err_read, stdio.err_write, error)) {
      t.err_master = stdio.err_read;
    }
    if (!error.empty() && !pty_warned_) {
      pty_warned_ = true;
      log_->warn("workers get pipes, not a terminal: {}", error);
    }
  }
  if (t.reads_terminal && t.out_master >= 0) {
    // As under torchrun, stdin and stdout are terminals: Python's input() and
    // pdb use readline. Its width is the output's, less the prefix.
    const auto size = worker_window(terminal_size(1).value_or(winsize{}), t.prefix_cols);
    if (const int in = relay_->open_pty(size, std::move(echo), error); in >= 0) {
      stdio.in = in;
      t.in_pty = true;
      reader_prefix_cols_ = t.prefix_cols;
    } else {
      log_->warn("local_rank={} reads the terminal without line editing: {}", local_rank, error);
      error.clear();
    }
  }
  if (t.reads_terminal && stdio.in == WorkerStdio::kInherit) {
    stdio.in = relay_->open_pipe(error);
    if (stdio.in < 0) {
      log_->warn("local_rank={} cannot read the terminal: {}", local_rank, error);
      stdio.in = WorkerStdio::kNull;
    }
  } else if (t.null_stdin) {
    stdio.in = WorkerStdio::kNull;
  }
  // The worker's controlling terminal: the one readline reads, else its output's.
  t.controlling = stdio.in >= 0 && t.in_pty ? 0 : t.out_master >= 0 ? 1 : t.err_master >= 0 ? 2 : -1;
  stdio.terminal = t.controlling;
  return stdio;
}

void AgentTerminal::close_input() {
  if (relay_) relay_->close_pipe();
}

void AgentTerminal::on_window_change() {
  if (const auto size = terminal_size(1) ? terminal_size(1) : terminal_size(2)) {
    console_line_->set_size(size->ws_col, size->ws_row);
    // Output terminals first: the reader's controlling terminal is its input
    // one, whose resize signals it, and what it then asks (the size of its
    // stdout) must be new already.
    if (resized_) resized_(*size);
    if (relay_) relay_->resize(worker_window(*size, reader_prefix_cols_));
  }
  winch_->async_wait([this](boost::system::error_code ec, int) {
    if (!ec) on_window_change();
  });
}

}  // namespace ddp::agent
