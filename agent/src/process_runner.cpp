#include "process_runner.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/process/v2/process.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
// Boost 1.81 ships these out of line: exactly one .cpp of a binary includes them.
#include <boost/process/v2/impl/environment.ipp>
#include <boost/process/v2/impl/error.ipp>
#include <boost/process/v2/impl/pid.ipp>
#include <boost/process/v2/impl/process_handle.ipp>

#include "containment.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "fork_exec.hpp"
#include "guard_protocol.hpp"
#include "guard_server_client.hpp"
#include "process_runner_child.hpp"
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

// How long the fork of a guard (or of an unguarded worker) may take to reach
// its exec before the spawn fails and what was started is killed (and
// kGuardReportTimeout, process_runner_child.hpp, for the guard's report). It
// takes milliseconds; the bound is for a child stuck on a lock, a full process
// table or a hung filesystem, which must never hold up a launch for good.
constexpr std::chrono::milliseconds kExecTimeout{5000};

struct Pipe {
  int read = -1;
  int write = -1;
  ~Pipe() {
    if (read >= 0) ::close(read);
    if (write >= 0) ::close(write);
  }
};

}  // namespace

struct ProcessRunner::Impl : std::enable_shared_from_this<ProcessRunner::Impl> {
  explicit Impl(asio::io_context& io_ctx) : io(io_ctx), cancel_fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~Impl() {
    if (cancel_fd >= 0) ::close(cancel_fd);
  }

  // A spawn waiting for the spawner thread. `work` keeps io.run() from
  // returning before the spawn is reported.
  struct Job {
    std::uint64_t id = 0;
    asio::executor_work_guard<asio::io_context::executor_type> work;
    SpawnSpec spec;
    ChildHandlers handlers;
    SpawnedFn on_spawned;
    WorkerStdio stdio;
    ZygoteSpawn zygote;
  };

  asio::io_context& io;
  std::map<pid_t, std::shared_ptr<Child>> children;   // io thread only
  std::vector<std::weak_ptr<PendingReport>> reports;  // io thread only: guards not reported yet

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> jobs;
  std::uint64_t next_job = 0;  // under mu
  bool stopping = false;
  std::thread spawner;
  // Jobs with an id below this are cancelled; the eventfd wakes a spawn
  // waiting for its child's exec.
  std::atomic<std::uint64_t> cancelled_below{0};
  int cancel_fd;
  bool prestart_guard_server = false;       // set before the spawner thread starts
  std::optional<GuardServer> guard_server;  // spawner thread only

  void spawner_loop() {
    if (prestart_guard_server && guard_server_enabled() && !guard_executable().empty()) {
      guard_server.emplace(guard_executable());
      guard_server->start();
    }
    while (true) {
      std::optional<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || !jobs.empty(); });
        if (stopping) {
          guard_server.reset();  // its guards are being killed (~ProcessRunner)
          return;
        }
        job.emplace(std::move(jobs.front()));
        jobs.pop_front();
      }
      launch(*job);
    }
  }

  // Answers a spawn that never started (its fds are closed by the caller's Pipes).
  void report_cancelled(SpawnedFn on_spawned) {
    asio::post(io, [on_spawned = std::move(on_spawned)] { on_spawned(0, ""); });
  }

  // On the spawner thread.
  void launch(Job& job) {
    SpawnSpec& spec = job.spec;
    const WorkerStdio& stdio = job.stdio;
    // Every fd in stdio is ours now: closed on return unless handed on.
    Pipe out{stdio.out_read, stdio.out_write};
    Pipe err{stdio.err_read, stdio.err_write};
    Pipe in{stdio.in >= 0 ? stdio.in : -1, -1};
    if (job.id < cancelled_below.load()) return report_cancelled(std::move(job.on_spawned));
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
      }
    }
    const int session = !spec.own_session     ? guard::kSessionShared
                        : stdio.terminal >= 0 ? stdio.terminal
                                              : guard::kSessionOwn;
    const ZygoteSpawn& zygote = job.zygote;
    if (error.empty() && !guard.empty() && zygote.connect) {
      if (const int conn = zygote.connect(); conn >= 0) {
        int in_fd = in.read >= 0 ? in.read : stdio.in == WorkerStdio::kNull ? -1 : 0;
        Pipe null_in;
        if (in_fd < 0) null_in.read = in_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        ZygoteRequest req{zygote.argv, spec.env, current_dir(), guard, spec.stop_timeout, session};
        const ZygoteReply reply = request_worker(conn, req, in_fd, out.write, err.write, kGuardReportTimeout);
        if (reply.error.empty()) {
          ::close(out.write);
          ::close(err.write);
          out.write = err.write = -1;
          auto child = std::make_shared<Child>(io, out.read, err.read, std::move(job.handlers));
          out.read = err.read = -1;
          child->zygote_conn.emplace(io, conn);
          child->group = reply.guard_pid;
          child->guarded = true;
          child->cgroup = reply.cgroup;
          report_spawned(child, reply.worker_pid, std::move(job.on_spawned));
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

    if (stdio.in == WorkerStdio::kNull) in.read = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (error.empty() && info.write >= 0 && guard_server_enabled()) {
      if (!guard_server) guard_server.emplace(guard);
      // The agent's stdin where the worker inherits it: the server's is /dev/null.
      const int in_fd = in.read >= 0 ? in.read : 0;
      guard::GuardRequest req{spec.stop_timeout,
                              guard_fence_file(),
                              current_dir(),
                              spec.cpu_affinity,
                              {},
                              std::move(spec.env),
                              session};
      req.argv.reserve(spec.args.size() + 1);
      req.argv.push_back(spec.executable);
      req.argv.insert(req.argv.end(), spec.args.begin(), spec.args.end());
      GuardServer::Started s =
          guard_server->start_guard(req, in_fd, out.write, err.write, info.write, kExecTimeout);
      spec.env = std::move(req.env);
      if (s.error.empty()) {
        close_child_ends(out, err, info);
        auto child = std::make_shared<Child>(io, out.read, err.read, std::move(job.handlers));
        out.read = err.read = -1;
        child->zygote_conn.emplace(io, s.conn);
        child->group = s.guard_pid;
        child->server_pid = guard_server->pid();
        return watch_guard(child, info, worker_exe, std::move(job.on_spawned));
      }
      if (!s.nothing_started) {
        error = "cannot start " + worker_exe + ": " + s.error;
      } else if (guard_server->pid() > 0) {
        log::get("agent")->warn("the ddp-guard server could not start a guard ({}): exec'ing it", s.error);
      }
    }
    if (error.empty() && info.write >= 0) {
      spec.args = guard_args(spec.executable, spec.args, spec.stop_timeout, info.write);
      spec.executable = guard;
    }

    pid_t pid = -1;
    if (error.empty()) {
      ExecSpec exec;
      static_cast<Program&>(exec) = std::move(spec);
      exec.in = in.read;
      exec.out = out.write;
      exec.err = err.write;
      exec.keep_fd = info.write;
      exec.cpus = spec.cpu_affinity ? &*spec.cpu_affinity : nullptr;
      exec.agent_pid = ::getpid();
      exec.session = session;
      const ExecCancel cancel{cancel_fd, [this, id = job.id] { return id < cancelled_below.load(); }};
      ForkExecResult r = fork_exec(exec, kExecTimeout, cancel);
      if (r.cancelled) return report_cancelled(std::move(job.on_spawned));
      if (r.pid > 0) {
        pid = r.pid;
      } else {
        error = "cannot start " + exec.executable + ": " + r.error;
      }
    }
    close_child_ends(out, err, info);
    if (pid < 0) {
      asio::post(io, [on_spawned = std::move(job.on_spawned), error] { on_spawned(-1, error); });
      return;
    }
    auto child = std::make_shared<Child>(io, out.read, err.read, std::move(job.handlers));
    out.read = err.read = -1;  // owned by the child's descriptors now
    child->proc.emplace(io.get_executor(), pid);
    child->group = pid;
    if (info.read < 0) {  // no guard: the worker is our child
      report_spawned(child, child->group, std::move(job.on_spawned));
      return;
    }
    watch_guard(child, info, worker_exe, std::move(job.on_spawned));
  }

  // The child holds its own copies of the write ends: EOF comes when it (and
  // anything it forked) is gone.
  static void close_child_ends(Pipe& out, Pipe& err, Pipe& info) {
    for (int* fd : {&out.write, &err.write, &info.write}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  }

  // On the spawner thread, for a guard started (exec'd, or forked by the guard
  // server) with `info` as its info pipe: the guard reports its worker's pid
  // once the worker's exec succeeded. That report is read on the io thread, so
  // that this thread can start the next guard at once: with eight workers,
  // eight guards start side by side instead of each waiting for the previous
  // worker's exec. Every operation on the report's descriptor and timer
  // happens on the io thread (Asio objects are not shared between threads).
  void watch_guard(const std::shared_ptr<Child>& child, Pipe& info, const std::string& worker_exe,
                   SpawnedFn on_spawned) {
    auto pending = std::make_shared<PendingReport>(io, info.read, worker_exe, child->group);
    info.read = -1;
    auto on_report = [self = weak_from_this(), child,
                      on_spawned = std::move(on_spawned)](GuardReport report) mutable {
      auto impl = self.lock();
      if (!impl) return;
      if (!report.error.empty()) {
        // The guard is exiting, or stuck (no report in time): its whole group
        // goes, and it is reaped when it is gone, off this thread's back (by
        // the guard server, once its connection is closed).
        ::kill(-child->group, SIGKILL);
        if (child->proc) {
          child->proc->async_wait([child](error_code, int) { child->proc->detach(); });
        } else {
          error_code ignored;
          child->zygote_conn->close(ignored);
        }
        on_spawned(-1, report.error);
        return;
      }
      child->guarded = true;
      child->cgroup = report.cgroup;
      impl->adopt(child, report.worker_pid, std::move(on_spawned));
    };
    asio::post(io, [self = weak_from_this(), pending, on_report = std::move(on_report)]() mutable {
      if (auto impl = self.lock()) impl->track(pending);
      pending->read(std::move(on_report));
    });
  }

  // On the io thread: remembers a guard whose report is due, for cancel_spawns().
  void track(const std::shared_ptr<PendingReport>& pending) {
    std::erase_if(reports, [](const auto& w) { return w.expired(); });
    reports.push_back(pending);
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

ProcessRunner::ProcessRunner(asio::io_context& io, bool prestart_guard_server)
    : impl_(std::make_shared<Impl>(io)) {
  if (impl_->cancel_fd < 0) throw InternalError("eventfd: " + errno_text(errno));
  impl_->prestart_guard_server = prestart_guard_server;
  impl_->spawner = std::thread([impl = impl_.get()] { impl->spawner_loop(); });
}

ProcessRunner::~ProcessRunner() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    impl_->cancelled_below = impl_->next_job;
  }
  impl_->cv.notify_all();
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t woke = ::write(impl_->cancel_fd, &one, sizeof(one));
  impl_->spawner.join();
  for (auto& job : impl_->jobs) {  // never started: their fds are still ours
    for (int fd :
         {job.stdio.in, job.stdio.out_read, job.stdio.out_write, job.stdio.err_read, job.stdio.err_write}) {
      if (fd >= 0) ::close(fd);
    }
  }
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
    impl_->jobs.push_back(Impl::Job{impl_->next_job++, asio::make_work_guard(impl_->io), std::move(spec),
                                    std::move(handlers), std::move(on_spawned), stdio, std::move(zygote)});
  }
  impl_->cv.notify_one();
}

void ProcessRunner::cancel_spawns() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->cancelled_below = impl_->next_job;
  }
  // Wakes a spawn waiting for its child's exec; queued ones see the bound.
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t woke = ::write(impl_->cancel_fd, &one, sizeof(one));
}

void ProcessRunner::kill_unreported() {
  for (const auto& weak : impl_->reports) {
    if (auto pending = weak.lock()) pending->cancel();
  }
  impl_->reports.clear();
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
