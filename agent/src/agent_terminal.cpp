// What workers get of the agent's terminal, as under torchrun where they share
// it: pseudo-terminals for the output streams whose console is a terminal
// (isatty, window size, SIGWINCH), and the terminal's input for one worker.
//
// The worker that reads the terminal is local rank 0, or the first rank of
// --local_ranks_filter (the one whose output the user sees); the others get
// /dev/null as stdin when the agent's stdin is a terminal, and the agent's
// stdin otherwise (a pipe or file is shared, as under torchrun).
#include <signal.h>
#include <unistd.h>

#include "agent_impl.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::agent {

void Agent::Impl::open_terminal() {
  relay = std::make_unique<TerminalRelay>(io, console_line);
  if (terminal_size(1) || terminal_size(2)) {
    winch = std::make_unique<boost::asio::signal_set>(io, SIGWINCH);
    winch->async_wait([this](boost::system::error_code ec, int) {
      if (ec) return;
      on_window_change();
    });
  }
}

WorkerTerminal Agent::Impl::plan_terminal(int local_rank, WorkerOutputOptions& out) {
  WorkerTerminal t;
  t.out_pty = out.console_out && terminal_size(out.console_out_fd).has_value();
  t.err_pty = out.console_err && terminal_size(out.console_err_fd).has_value();
  const int reader = cfg.local_ranks_filter.empty() ? 0 : cfg.local_ranks_filter.front();
  t.reads_terminal = relay && relay->enabled() && local_rank == reader;
  t.null_stdin = !t.reads_terminal && ::isatty(0) != 0;
  // A prompt ("(Pdb) ") has no newline: the reader's output streams too.
  out.stream_out = t.out_pty || (t.reads_terminal && out.console_out);
  out.stream_err = t.err_pty || (t.reads_terminal && out.console_err);
  out.console_line = console_line;
  return t;
}

WorkerStdio Agent::Impl::open_stdio(Worker& w) {
  WorkerStdio stdio;
  WorkerTerminal& t = w.terminal;
  std::string error;
  if (t.out_pty || t.err_pty) {
    const auto size = terminal_size(t.out_pty ? 1 : 2).value_or(winsize{});
    if (t.out_pty && open_output_pty(size, stdio.out_read, stdio.out_write, error)) {
      t.out_master = stdio.out_read;
    }
    if (error.empty() && t.err_pty && open_output_pty(size, stdio.err_read, stdio.err_write, error)) {
      t.err_master = stdio.err_read;
    }
    if (!error.empty() && !pty_warned) {
      pty_warned = true;
      log->warn("workers get pipes, not a terminal: {}", error);
    }
  }
  if (t.reads_terminal) {
    stdio.in = relay->open_pipe(error);
    if (stdio.in < 0) {
      log->warn("local_rank={} cannot read the terminal: {}", w.local_rank, error);
      stdio.in = WorkerStdio::kNull;
    }
  } else if (t.null_stdin) {
    stdio.in = WorkerStdio::kNull;
  }
  return stdio;
}

void Agent::Impl::on_window_change() {
  if (const auto size = terminal_size(1) ? terminal_size(1) : terminal_size(2)) {
    for (const auto& w : workers) {
      if (!w.spawned || w.done || (w.terminal.out_master < 0 && w.terminal.err_master < 0)) continue;
      resize_ptys(w.terminal.out_master, w.terminal.err_master, *size);
      // The pseudo-terminal is no controlling terminal, so the kernel does not signal.
      runner->signal_group(w.pid, SIGWINCH);
    }
  }
  winch->async_wait([this](boost::system::error_code ec, int) {
    if (!ec) on_window_change();
  });
}

}  // namespace ddp::agent
