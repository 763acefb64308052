#include "process_runner_child.hpp"

#include <signal.h>

#include <boost/asio/read_until.hpp>
#include <set>

#include "ddp/common/logging.hpp"
#include "guard_protocol.hpp"
#include "zygote_client.hpp"

namespace ddp::agent {

namespace asio = boost::asio;
using error_code = boost::system::error_code;

namespace {

// Once a worker has exited, how long its pipes may stay open (a grandchild that
// inherited them): past this its remaining output is dropped and the exit reported.
constexpr std::chrono::milliseconds kDrainTimeout{1000};

}  // namespace

void PendingReport::cancel() const {
  if (!finished) ::kill(guard_pid, guard::kill_now_signal());
}

void PendingReport::read(std::function<void(GuardReport)> done) {
  done_ = std::move(done);
  timer.expires_after(kGuardReportTimeout);
  timer.async_wait([self = shared_from_this()](error_code ec) {
    if (ec) return;
    GuardReport r;
    r.error = "cannot start " + self->executable + ": ddp-guard did not report within " +
              std::to_string(kGuardReportTimeout.count()) + " ms";
    self->finish(std::move(r));
  });
  next();
}

void PendingReport::next() {
  desc.async_read_some(asio::buffer(chunk), [self = shared_from_this()](error_code ec, std::size_t n) {
    if (self->finished) return;
    self->text.append(self->chunk.data(), n);
    if (!ec) return self->next();
    // EOF: the guard closed its end after reporting (or died before).
    self->finish(parse_guard_report(self->text, self->executable));
  });
}

void PendingReport::finish(GuardReport r) {
  if (finished) return;
  finished = true;
  timer.cancel();
  error_code ignored;
  desc.close(ignored);
  auto done = std::move(done_);
  done(std::move(r));
}

// Once per server, on the io thread: its guards' exits are lost with it.
void report_server_lost(pid_t server) {
  static std::set<pid_t> reported;
  if (!reported.insert(server).second) return;
  log::get("agent")->warn(
      "the ddp-guard server (pid {}) is gone: each guard it started has killed its worker's whole tree",
      server);
}

void Child::start() {
  read(StdStream::kOut);
  read(StdStream::kErr);
  if (zygote_conn) {
    asio::async_read_until(
        *zygote_conn, zygote_buf, '\n', [self = shared_from_this()](error_code ec, std::size_t n) {
          std::optional<int> exit_status;
          if (!ec) {
            std::string line(asio::buffers_begin(self->zygote_buf.data()),
                             asio::buffers_begin(self->zygote_buf.data()) + static_cast<std::ptrdiff_t>(n));
            exit_status = parse_zygote_exit(line);
          }
          // No exit line: the zygote or guard server died, and with it
          // (its parent-death signal) the guard and the worker.
          if (!exit_status && self->server_pid > 0) report_server_lost(self->server_pid);
          self->on_guard_exit(exit_status.value_or(SIGKILL));
        });
    return;
  }
  proc->async_wait([self = shared_from_this()](error_code ec, int) {
    // ec only if the child was already reaped elsewhere; report it as killed.
    const int wait_status = ec ? SIGKILL : self->proc->native_exit_code();
    // Reaped: the pid may be reused from now on (pid_max can be 32768), and
    // basic_process's destructor would otherwise waitpid/SIGKILL that pid.
    self->proc->detach();
    self->on_guard_exit(wait_status);
  });
}

void Child::on_guard_exit(int wait_status) {
  exited = true;
  status = wait_status;
  if (zygote_conn) {
    error_code ignored;
    zygote_conn->close(ignored);
  }
  // Empty and removed unless the guard itself was killed.
  if (!cgroup.empty()) release_cgroup(cgroup);
  if (out_open || err_open) {
    drain.expires_after(kDrainTimeout);
    drain.async_wait([self = shared_from_this()](error_code tec) {
      if (tec) return;
      self->close_pipes();
      self->maybe_report();
    });
  }
  maybe_report();
}

void Child::read(StdStream which) {
  auto& desc = which == StdStream::kOut ? out : err;
  auto& buf = which == StdStream::kOut ? out_buf : err_buf;
  desc.async_read_some(asio::buffer(buf),
                       [self = shared_from_this(), which, &buf](error_code ec, std::size_t n) {
                         if (n > 0 && self->handlers.on_output) {
                           self->handlers.on_output(which, std::string_view(buf.data(), n));
                         }
                         if (ec) {
                           (which == StdStream::kOut ? self->out_open : self->err_open) = false;
                           self->maybe_report();
                           return;
                         }
                         self->read(which);
                       });
}

void Child::close_pipes() {
  error_code ignored;
  out.close(ignored);
  err.close(ignored);
  out_open = err_open = false;
}

void Child::maybe_report() {
  if (reported || !exited || out_open || err_open) return;
  reported = true;
  drain.cancel();
  close_pipes();
  if (handlers.on_exit) handlers.on_exit(status);
  if (on_done) on_done();
}

}  // namespace ddp::agent
