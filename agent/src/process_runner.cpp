#include "process_runner.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/process/v2/posix/default_launcher.hpp>
#include <boost/process/v2/process.hpp>
#include <boost/process/v2/stdio.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
// Boost 1.81 ships these out of line: exactly one .cpp of a binary includes them.
#include <boost/process/v2/impl/environment.ipp>
#include <boost/process/v2/impl/error.ipp>
#include <boost/process/v2/impl/pid.ipp>
#include <boost/process/v2/impl/process_handle.ipp>
#include <boost/process/v2/posix/detail/close_handles.ipp>

#include "containment.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/exit_code.hpp"
#include "ddp/common/logging.hpp"
#include "guard_protocol.hpp"
#include "zygote_client.hpp"

namespace ddp::agent {

namespace asio = boost::asio;
namespace bp = boost::process::v2;
using error_code = boost::system::error_code;

namespace {

std::string current_dir() {
  std::error_code ec;
  const auto p = std::filesystem::current_path(ec);
  return ec ? std::string("/") : p.string();
}

// Once a worker has exited, how long its pipes may stay open (a grandchild that
// inherited them): past this its remaining output is dropped and the exit reported.
constexpr std::chrono::milliseconds kDrainTimeout{1000};
// How long a guard may take to fork and exec its worker before the spawn fails.
constexpr std::chrono::milliseconds kGuardReportTimeout{30000};

// Runs in the child between fork and exec: only async-signal-safe calls.
struct WorkerSetup {
  const char* const* envp;
  pid_t agent_pid;
  int keep_fd = -1;                 // the guard's info fd, inherited past exec
  const cpu_set_t* cpus = nullptr;  // --numa_binding, inherited by the worker

  error_code on_setup(bp::posix::default_launcher& launcher, const bp::filesystem::path&,
                      const char* const*) {
    // Replaces the whole environment: the agent built it from its own plus the contract.
    launcher.env = envp;
    if (keep_fd >= 0) launcher.fd_whitelist.push_back(keep_fd);
    return {};
  }

  error_code on_exec_setup(bp::posix::default_launcher&, const bp::filesystem::path&, const char* const*) {
    // Ignored signals and the signal mask survive exec: give the worker the
    // defaults whatever the agent uses (ddprun ignores SIGPIPE).
    ::signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (::setpgid(0, 0) != 0) return {errno, boost::system::system_category()};
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return {errno, boost::system::system_category()};
    // The agent may have died before prctl took effect: then nobody would kill us.
    if (::getppid() != agent_pid) ::_exit(signal_exit_code(SIGKILL));
    // Boost 1.81's close_range path skips fds below its own error pipe (it
    // compares a whitelist entry with itself), so mark every fd >= 3
    // close-on-exec here; its error pipe is close-on-exec already.
    if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
      struct rlimit lim {};
      const long max_fd = ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < 65536
                              ? static_cast<long>(lim.rlim_cur)
                              : 65536;
      for (int fd = 3; fd < max_fd; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    if (keep_fd >= 0) ::fcntl(keep_fd, F_SETFD, 0);
    if (cpus != nullptr && ::sched_setaffinity(0, sizeof(cpu_set_t), cpus) != 0) {
      return {errno, boost::system::system_category()};
    }
    return {};
  }

  void on_exec_error(bp::posix::default_launcher&, const bp::filesystem::path&, const char* const*,
                     const error_code&) {
    // Not exit(): the forked copy of a threaded agent must not run atexit handlers.
    ::_exit(exec_failed_exit_code());
  }
};

struct Pipe {
  int read = -1;
  int write = -1;
  ~Pipe() {
    if (read >= 0) ::close(read);
    if (write >= 0) ::close(write);
  }
};

}  // namespace

// A guard's report, read to EOF on the io thread, with a deadline.
struct PendingReport : std::enable_shared_from_this<PendingReport> {
  PendingReport(asio::io_context& io, int fd, std::string exe)
      : desc(io, fd), timer(io), executable(std::move(exe)) {}

  void read(std::function<void(GuardReport)> done) {
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

  void next() {
    desc.async_read_some(asio::buffer(chunk), [self = shared_from_this()](error_code ec, std::size_t n) {
      if (self->finished) return;
      self->text.append(self->chunk.data(), n);
      if (!ec) return self->next();
      // EOF: the guard closed its end after reporting (or died before).
      self->finish(parse_guard_report(self->text, self->executable));
    });
  }

  void finish(GuardReport r) {
    if (finished) return;
    finished = true;
    timer.cancel();
    error_code ignored;
    desc.close(ignored);
    auto done = std::move(done_);
    done(std::move(r));
  }

  asio::posix::stream_descriptor desc;
  asio::steady_timer timer;
  std::string executable;
  std::string text;
  std::array<char, 512> chunk{};
  bool finished = false;
  std::function<void(GuardReport)> done_;
};

struct Child : std::enable_shared_from_this<Child> {
  Child(asio::io_context& io, int out_fd, int err_fd, ChildHandlers h)
      : out(io, out_fd), err(io, err_fd), drain(io), handlers(std::move(h)) {}

  // The guard, our child; or, for a worker forked by the preload zygote (the
  // guard is the zygote's child), the connection its exit line comes on.
  std::optional<bp::basic_process<asio::io_context::executor_type>> proc;
  std::optional<asio::posix::stream_descriptor> zygote_conn;
  asio::streambuf zygote_buf;
  asio::posix::stream_descriptor out;
  asio::posix::stream_descriptor err;
  asio::steady_timer drain;
  ChildHandlers handlers;
  std::array<char, 16384> out_buf{};
  std::array<char, 16384> err_buf{};
  bool out_open = true;
  bool err_open = true;
  bool exited = false;
  bool reported = false;
  int status = 0;
  pid_t group = -1;  // the guard's pid, which leads the worker's process group
  bool guarded = false;
  std::string cgroup;             // the worker's cgroup v2, if its guard made one
  std::function<void()> on_done;  // unregisters from the runner

  void start() {
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
            // No exit line: the zygote died, and with it (its
            // parent-death signal) the guard and the worker.
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

  void on_guard_exit(int wait_status) {
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

  void read(StdStream which) {
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

  void close_pipes() {
    error_code ignored;
    out.close(ignored);
    err.close(ignored);
    out_open = err_open = false;
  }

  void maybe_report() {
    if (reported || !exited || out_open || err_open) return;
    reported = true;
    drain.cancel();
    close_pipes();
    if (handlers.on_exit) handlers.on_exit(status);
    if (on_done) on_done();
  }
};

struct ProcessRunner::Impl : std::enable_shared_from_this<ProcessRunner::Impl> {
  explicit Impl(asio::io_context& io_ctx) : io(io_ctx) {}

  asio::io_context& io;
  std::map<pid_t, std::shared_ptr<Child>> children;  // io thread only

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> jobs;
  bool stopping = false;
  std::thread spawner;

  void spawner_loop() {
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || !jobs.empty(); });
        if (stopping) return;
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      job();
    }
  }

  // On the spawner thread.
  void launch(SpawnSpec spec, ChildHandlers handlers, SpawnedFn on_spawned, WorkerStdio stdio,
              const ZygoteSpawn& zygote) {
    // Every fd in stdio is ours now: closed on return unless handed on.
    Pipe out{stdio.out_read, stdio.out_write};
    Pipe err{stdio.err_read, stdio.err_write};
    Pipe in{stdio.in >= 0 ? stdio.in : -1, -1};
    std::string error;
    int fds[2];
    if (out.read < 0 && ::pipe2(fds, O_CLOEXEC) == 0) {
      out.read = fds[0];
      out.write = fds[1];
    }
    if (err.read < 0 && ::pipe2(fds, O_CLOEXEC) == 0) {
      err.read = fds[0];
      err.write = fds[1];
    }
    if (out.read < 0 || err.read < 0) error = "pipe: " + errno_text(errno);
    Pipe info;
    const std::string& guard = guard_executable();
    const std::string worker_exe = spec.executable;
    if (!guard.empty() && error.empty()) {
      if (::pipe2(fds, O_CLOEXEC) != 0) {
        error = "pipe: " + errno_text(errno);
      } else {
        info.read = fds[0];
        info.write = fds[1];
        spec.args = guard_args(spec.executable, spec.args, spec.stop_timeout, info.write);
        spec.executable = guard;
      }
    }
    if (error.empty() && !guard.empty() && zygote.connect) {
      if (const int conn = zygote.connect(); conn >= 0) {
        int in_fd = in.read >= 0 ? in.read : stdio.in == WorkerStdio::kNull ? -1 : 0;
        Pipe null_in;
        if (in_fd < 0) null_in.read = in_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        ZygoteRequest req{zygote.argv, spec.env, current_dir(), guard, spec.stop_timeout};
        const ZygoteReply reply = request_worker(conn, req, in_fd, out.write, err.write, kGuardReportTimeout);
        if (reply.error.empty()) {
          ::close(out.write);
          ::close(err.write);
          out.write = err.write = -1;
          auto child = std::make_shared<Child>(io, out.read, err.read, std::move(handlers));
          out.read = err.read = -1;
          child->zygote_conn.emplace(io, conn);
          child->group = reply.guard_pid;
          child->guarded = true;
          child->cgroup = reply.cgroup;
          report_spawned(child, reply.worker_pid, std::move(on_spawned));
          return;
        }
        ::close(conn);
        if (reply.nothing_started) {
          log::get("agent")->warn("preload zygote could not start a worker ({}): starting it normally",
                                  reply.error);
        } else {
          error = "preload zygote: " + reply.error;  // it may run: never start the rank twice
        }
      }
    }
    std::vector<const char*> envp;
    for (const auto& e : spec.env) envp.push_back(e.c_str());
    envp.push_back(nullptr);

    std::optional<bp::basic_process<asio::io_context::executor_type>> proc;
    if (error.empty()) {
      error_code ec;
      bp::posix::default_launcher launcher;
      bp::process_stdio child_stdio{{}, out.write, err.write};
      if (stdio.in == WorkerStdio::kNull) in.read = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (in.read >= 0) child_stdio.in = in.read;
      auto p = launcher(io.get_executor(), ec, spec.executable, spec.args, child_stdio,
                        WorkerSetup{envp.data(), ::getpid(), info.write,
                                    spec.cpu_affinity ? &*spec.cpu_affinity : nullptr});
      if (ec) {
        error = "cannot start " + spec.executable + ": " + ec.message();
      } else {
        proc.emplace(std::move(p));
      }
    }
    // The child holds its own copies of the write ends: EOF comes when it (and
    // anything it forked) is gone.
    if (out.write >= 0) ::close(out.write);
    if (err.write >= 0) ::close(err.write);
    out.write = err.write = -1;
    if (info.write >= 0) ::close(info.write);
    info.write = -1;
    if (!proc) {
      asio::post(io, [on_spawned = std::move(on_spawned), error] { on_spawned(-1, error); });
      return;
    }
    auto child = std::make_shared<Child>(io, out.read, err.read, std::move(handlers));
    out.read = err.read = -1;  // owned by the child's descriptors now
    child->proc.emplace(std::move(*proc));
    child->group = child->proc->id();
    if (info.read < 0) {  // no guard: the worker is our child
      report_spawned(child, child->group, std::move(on_spawned));
      return;
    }
    // The guard reports its worker's pid once the worker's exec succeeded.
    // That report is read on the io thread, so that this thread can start the
    // next guard at once: with eight workers, eight guards start side by side
    // instead of each waiting for the previous worker's exec.
    // Every operation on the report's descriptor and timer happens on the io
    // thread (Asio objects are not shared between threads).
    auto pending = std::make_shared<PendingReport>(io, info.read, worker_exe);
    info.read = -1;
    auto on_report = [self = weak_from_this(), child,
                      on_spawned = std::move(on_spawned)](GuardReport report) mutable {
      auto impl = self.lock();
      if (!impl) return;
      if (!report.error.empty()) {
        child->proc.reset();  // kills (if needed) and reaps the guard
        on_spawned(-1, report.error);
        return;
      }
      child->guarded = true;
      child->cgroup = report.cgroup;
      impl->adopt(child, report.worker_pid, std::move(on_spawned));
    };
    asio::post(
        io, [pending, on_report = std::move(on_report)]() mutable { pending->read(std::move(on_report)); });
  }

  // On the io thread: a started child joins the table and is watched.
  void adopt(const std::shared_ptr<Child>& child, pid_t pid, SpawnedFn on_spawned) {
    children[pid] = child;
    child->on_done = [weak = weak_from_this(), pid] {
      if (auto i = weak.lock()) i->children.erase(pid);
    };
    // Report the spawn before any exit can be reported.
    on_spawned(pid, "");
    child->start();
  }

  // On the spawner thread: hands a started child to the io thread.
  void report_spawned(const std::shared_ptr<Child>& child, pid_t pid, SpawnedFn on_spawned) {
    auto self = weak_from_this();
    asio::post(io, [self, child, pid, on_spawned = std::move(on_spawned)]() mutable {
      if (auto impl = self.lock()) impl->adopt(child, pid, std::move(on_spawned));
    });
  }
};

ProcessRunner::ProcessRunner(asio::io_context& io) : impl_(std::make_shared<Impl>(io)) {
  impl_->spawner = std::thread([impl = impl_.get()] { impl->spawner_loop(); });
}

ProcessRunner::~ProcessRunner() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  impl_->spawner.join();
  for (auto& [pid, child] : impl_->children) {
    signal_group(pid, SIGKILL);  // a guard kills the tree and exits on its own
    // basic_process's destructor would SIGKILL the guard before it is done.
    if (child->proc && child->guarded && !child->exited) child->proc->detach();
    child->handlers = {};
    child->close_pipes();
  }
  impl_->children.clear();
}

void ProcessRunner::spawn(SpawnSpec spec, ChildHandlers handlers, SpawnedFn on_spawned, WorkerStdio stdio,
                          ZygoteSpawn zygote) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    // The work guard keeps io.run() from returning before the spawn is reported.
    impl_->jobs.emplace_back([impl = impl_.get(), work = asio::make_work_guard(impl_->io),
                              spec = std::move(spec), handlers = std::move(handlers),
                              on_spawned = std::move(on_spawned), stdio,
                              zygote = std::move(zygote)]() mutable {
      impl->launch(std::move(spec), std::move(handlers), std::move(on_spawned), stdio, zygote);
    });
  }
  impl_->cv.notify_one();
}

void ProcessRunner::signal_group(pid_t pid, int sig) {
  const auto it = impl_->children.find(pid);
  if (it == impl_->children.end() || it->second->exited) return;  // reaped: the pid may be reused
  const Child& c = *it->second;
  if (c.guarded && sig == SIGKILL) {
    // A SIGKILL would kill the guard first and orphan what left the group.
    ::kill(c.group, guard::kill_now_signal());
    return;
  }
  // The guard (or unguarded worker) leads the group (setpgid ran before exec,
  // and spawn() reports only after exec), so this also reaches whatever the
  // worker forked in its group; the guard forwards it to the rest.
  ::kill(-c.group, sig);
}

}  // namespace ddp::agent
