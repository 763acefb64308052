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
#include <boost/asio/steady_timer.hpp>
#include <boost/process/v2/posix/default_launcher.hpp>
#include <boost/process/v2/process.hpp>
#include <boost/process/v2/stdio.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
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
#include "guard_protocol.hpp"

namespace ddp::agent {

namespace asio = boost::asio;
namespace bp = boost::process::v2;
using error_code = boost::system::error_code;

namespace {

// Once a worker has exited, how long its pipes may stay open (a grandchild that
// inherited them): past this its remaining output is dropped and the exit reported.
constexpr std::chrono::milliseconds kDrainTimeout{1000};
// How long a guard may take to fork and exec its worker before the spawn fails.
constexpr std::chrono::milliseconds kGuardReportTimeout{30000};

// Runs in the child between fork and exec: only async-signal-safe calls.
struct WorkerSetup {
  const char* const* envp;
  pid_t agent_pid;
  int keep_fd = -1;  // the guard's info fd, inherited past exec

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

struct Child : std::enable_shared_from_this<Child> {
  Child(asio::io_context& io, bp::basic_process<asio::io_context::executor_type> p, int out_fd, int err_fd,
        ChildHandlers h)
      : proc(std::move(p)), out(io, out_fd), err(io, err_fd), drain(io), handlers(std::move(h)) {}

  bp::basic_process<asio::io_context::executor_type> proc;
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
    proc.async_wait([self = shared_from_this()](error_code ec, int) {
      self->exited = true;
      // ec only if the child was already reaped elsewhere; report it as killed.
      self->status = ec ? SIGKILL : self->proc.native_exit_code();
      // Reaped: the pid may be reused from now on (pid_max can be 32768), and
      // basic_process's destructor would otherwise waitpid/SIGKILL that pid.
      self->proc.detach();
      // Empty and removed unless the guard itself was killed.
      if (!self->cgroup.empty()) release_cgroup(self->cgroup);
      if (self->out_open || self->err_open) {
        self->drain.expires_after(kDrainTimeout);
        self->drain.async_wait([self](error_code tec) {
          if (tec) return;
          self->close_pipes();
          self->maybe_report();
        });
      }
      self->maybe_report();
    });
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
  void launch(SpawnSpec spec, ChildHandlers handlers, SpawnedFn on_spawned, WorkerStdio stdio) {
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
                        WorkerSetup{envp.data(), ::getpid(), info.write});
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
    GuardReport report;
    if (proc && info.read >= 0) {
      report = read_guard_report(info.read, worker_exe, kGuardReportTimeout);
      if (!report.error.empty()) {
        error = report.error;
        proc.reset();  // kills (if needed) and reaps the guard
      }
    }

    auto self = weak_from_this();
    if (!proc) {
      asio::post(io, [on_spawned = std::move(on_spawned), error] { on_spawned(-1, error); });
      return;
    }
    const pid_t group = proc->id();
    const pid_t pid = report.worker_pid > 0 ? report.worker_pid : group;
    auto child = std::make_shared<Child>(io, std::move(*proc), out.read, err.read, std::move(handlers));
    child->group = group;
    child->guarded = report.worker_pid > 0;
    child->cgroup = report.cgroup;
    out.read = err.read = -1;  // owned by the child's descriptors now
    asio::post(io, [self, child, pid, on_spawned = std::move(on_spawned)] {
      auto impl = self.lock();
      if (!impl) return;
      impl->children[pid] = child;
      child->on_done = [weak = std::weak_ptr<Impl>(impl), pid] {
        if (auto i = weak.lock()) i->children.erase(pid);
      };
      // Report the spawn before any exit can be reported.
      on_spawned(pid, "");
      child->start();
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
    if (child->guarded && !child->exited) child->proc.detach();
    child->handlers = {};
    child->close_pipes();
  }
  impl_->children.clear();
}

void ProcessRunner::spawn(SpawnSpec spec, ChildHandlers handlers, SpawnedFn on_spawned, WorkerStdio stdio) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    // The work guard keeps io.run() from returning before the spawn is reported.
    impl_->jobs.emplace_back([impl = impl_.get(), work = asio::make_work_guard(impl_->io),
                              spec = std::move(spec), handlers = std::move(handlers),
                              on_spawned = std::move(on_spawned), stdio]() mutable {
      impl->launch(std::move(spec), std::move(handlers), std::move(on_spawned), stdio);
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
