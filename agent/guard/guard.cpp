#include "guard.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "cgroup_scope.hpp"
#include "ddp/common/exit_code.hpp"
#include "ddp/common/time_bounds.hpp"
#include "fence_deadline.hpp"
#include "guard_protocol.hpp"
#include "oom_watch.hpp"
#include "proc_tree.hpp"
#include "stale_cgroups.hpp"

namespace ddp::guard {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How often the tree is re-read while waiting for it to empty: descendants'
// deaths are not reported to the guard (only its own children's are).
constexpr milliseconds kPollPeriod{20};

bool write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

void say(const std::string& line) { write_all(2, std::string(kGuardLinePrefix) + line + "\n"); }

std::string seconds(milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

class Guard {
 public:
  explicit Guard(const GuardOptions& o)
      : o_(o), self_(::getpid()), pgid_(::getpgrp()), fence_(o.fence_file) {}

  [[noreturn]] void run() {
    // Every signal but the synchronous faults is taken here: a notice that
    // reaches the group (SIGUSR1, SIGWINCH, ...) must not end the guard.
    const sigset_t set = taken_signals();
    ::sigprocmask(SIG_BLOCK, &set, nullptr);
    const int kill_now = kill_now_signal();
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    // The agent spawned us with SIGKILL as parent-death signal; ours must be
    // catchable so that the tree is killed before the guard goes.
    ::prctl(PR_SET_PDEATHSIG, kill_now);
    const bool agent_gone = o_.agent_pid > 0 && ::getppid() != o_.agent_pid;
    if (!agent_gone) {
      // Where ddprun and its guards were all SIGKILLed at once, what their
      // workers left still runs in their cgroups, beside the one made here.
      const std::string parent = own_cgroup_dir();
      if (o_.reap_stale_siblings) {
        for (const auto& stale : reap_stale_guard_cgroups(parent, 1)) {
          if (worth_telling(stale)) say(describe(stale));
        }
      }
      cgroup_ = CgroupScope::create(self_, parent);
    }
    if (o_.adopt_pid > 0) {
      adopt_worker();
    } else {
      spawn_worker();
    }
    if (agent_gone) start_killing();
    while (true) {
      const auto wait = next_wakeup();
      siginfo_t info{};
      int sig = -1;
      if (wait.count() < 0) {
        sig = ::sigwaitinfo(&set, &info);
      } else {
        timespec ts{static_cast<time_t>(wait.count() / 1000),
                    static_cast<long>(wait.count() % 1000) * 1000000L};
        sig = ::sigtimedwait(&set, &info, &ts);
      }
      if (sig == SIGCHLD) {
        reap();
      } else if (sig == kill_now) {
        start_killing();
      } else if (sig == SIGHUP && info.si_code == SI_KERNEL) {
        // The hangup of the session's controlling terminal, the worker's
        // pseudo-terminal that the agent closed (worker_session.hpp): what
        // reads it sees EOF, as with a pipe; it stops nothing.
      } else if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT) {
        forward(sig);
      } else if (sig > 0) {
        relay(sig);
      }
      check_fence();
      step();
    }
  }

 private:
  enum class Phase { kRunning, kDraining, kKilling };

  void spawn_worker() {
    int err_pipe[2];
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) report_and_exit_127(errno);
    std::vector<char*> argv;
    for (const auto& a : o_.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    // Started inside the cgroup where the kernel can; else moved in before exec.
    pid_t pid = cgroup_ ? cgroup_->fork_into() : -1;
    const bool joined = pid >= 0;
    if (pid < 0) pid = ::fork();
    if (pid < 0) report_and_exit_127(errno);
    if (pid == 0) {
      // The worker: async-signal-safe calls only until exec.
      ::close(err_pipe[0]);
      sigset_t none;
      ::sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != self_) ::_exit(signal_exit_code(SIGKILL));
      if (cgroup_ && !joined) cgroup_->join_self();
      if (o_.info_fd >= 0) ::close(o_.info_fd);
      ::execv(argv[0], argv.data());
      const int e = errno;
      ssize_t ignored = ::write(err_pipe[1], &e, sizeof(e));
      (void)ignored;
      ::_exit(exec_failed_exit_code());
    }
    worker_ = pid;
    ::close(err_pipe[1]);
    int exec_errno = 0;
    ssize_t n = 0;
    do {
      n = ::read(err_pipe[0], &exec_errno, sizeof(exec_errno));
    } while (n < 0 && errno == EINTR);
    ::close(err_pipe[0]);
    if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
      ::waitpid(pid, nullptr, 0);
      report_and_exit_127(exec_errno);
    }
    report_started();
  }

  // The worker was forked by our parent-to-be before it exec'd us: it is our
  // child already and waits (on its own, docs/agent-workers.md) for the report below
  // before it runs user code, so it is in the cgroup before it can fork.
  void adopt_worker() {
    worker_ = o_.adopt_pid;
    if (cgroup_ && !cgroup_->join(worker_)) cgroup_.reset();
    report_started();
    reap();  // it may have ended before the guard took SIGCHLD
  }

  void report_started() {
    std::string text = std::string(kInfoPid) + " " + std::to_string(worker_) + "\n";
    if (cgroup_) text += std::string(kInfoCgroup) + " " + cgroup_->path() + "\n";
    if (o_.info_fd >= 0) {
      write_all(o_.info_fd, text);
      ::close(o_.info_fd);
    }
    // After the report: the agent does not wait for these few reads.
    oom_.start(cgroup_ ? cgroup_->path() : own_cgroup_dir(), OomWatch::proc_self_cgroup());
  }

  // A worker the kernel's OOM killer ended is named as such on its stderr,
  // where the agent's failure report reads it (the exit alone says SIGKILL).
  void report_oom_kill() {
    if (!worker_done_ || !WIFSIGNALED(worker_status_) || WTERMSIG(worker_status_) != SIGKILL) return;
    if (phase_ == Phase::kKilling) return;  // ours
    if (const auto where = oom_.killed()) say(oom_line(worker_, OomWatch::peak_bytes(*where), *where));
  }

  [[noreturn]] void report_and_exit_127(int err) {
    if (o_.info_fd >= 0) write_all(o_.info_fd, std::string(kInfoError) + " " + std::to_string(err) + "\n");
    cgroup_.reset();
    ::_exit(exec_failed_exit_code());
  }

  // Reaps every child: the worker, and orphans adopted as subreaper.
  void reap() {
    while (true) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      // No child at all: as a subreaper the guard is the parent of every
      // orphan of its tree, so no descendant is left either.
      no_children_ = pid < 0 && errno == ECHILD;
      if (pid <= 0) return;
      if (pid == worker_) {
        worker_done_ = true;
        worker_status_ = status;
      }
    }
  }

  // A stop signal reached the worker's process group (the agent signals the
  // group); the processes that left the group get it from here.
  void forward(int sig) {
    if (phase_ == Phase::kKilling) return;
    for (const auto& p : descendants(self_)) {
      if (p.pgid != pgid_) ::kill(p.pid, sig);
    }
    stop_forwarded_ = true;
  }

  // Any other signal that reached the group (a forwarded notice): the
  // processes that left the group get it too; it stops nothing.
  void relay(int sig) {
    if (phase_ == Phase::kKilling) return;
    for (const auto& p : descendants(self_)) {
      if (p.pgid != pgid_) ::kill(p.pid, sig);
    }
  }

  void start_killing() {
    if (phase_ == Phase::kKilling) return;
    phase_ = Phase::kKilling;
    deadline_ = ddp::saturating_add(Clock::now(), o_.kill_wait);
    kill_tree();
  }

  void kill_tree() {
    if (cgroup_) cgroup_->kill_all();
    for (const auto& p : descendants(self_)) ::kill(p.pid, SIGKILL);
  }

  milliseconds next_wakeup() const {
    const milliseconds poll = phase_ == Phase::kRunning && !worker_done_ ? milliseconds(-1) : kPollPeriod;
    const milliseconds fence = phase_ == Phase::kKilling ? milliseconds(-1) : fence_.left();
    if (fence.count() < 0) return poll;
    return poll.count() < 0 ? fence : std::min(poll, fence);
  }

  // The agent moves the deadline on while the store answers it. Past it, the
  // store may count this node gone and the others start a new world: the
  // tree dies now, whether or not the agent can still see to it.
  void check_fence() {
    if (phase_ == Phase::kKilling || fence_.left().count() != 0) return;
    say("no word from the rendezvous store by this node's fence deadline (is ddprun stopped or hung?): "
        "killing worker pid=" +
        std::to_string(worker_) + " and everything it started");
    start_killing();
  }

  void step() {
    reap();
    if (phase_ == Phase::kRunning) {
      if (!worker_done_) return;
      // The usual end: the worker left nothing behind, and reading /proc to
      // confirm it would cost milliseconds on a busy host.
      if (no_children_) finish();
      const auto left = descendants(self_);
      if (left.empty()) finish();
      say("worker pid=" + std::to_string(worker_) + " exited; stopping " + std::to_string(left.size()) +
          " process(es) it left running (SIGTERM, SIGKILL after " + seconds(o_.stop_timeout) + ")");
      if (!stop_forwarded_) {
        for (const auto& p : left) ::kill(p.pid, SIGTERM);
      }
      phase_ = Phase::kDraining;
      // --stop-timeout-ms is any long the command line held.
      deadline_ = ddp::saturating_add(Clock::now(), o_.stop_timeout);
      return;
    }
    if (no_children_ && worker_done_) finish();
    const auto left = descendants(self_);
    if (left.empty() && worker_done_) finish();
    if (Clock::now() < deadline_) {
      if (phase_ == Phase::kKilling) kill_tree();  // whatever forked meanwhile
      return;
    }
    if (phase_ == Phase::kDraining) {
      start_killing();
      return;
    }
    // Only processes in uninterruptible sleep survive SIGKILL this long: the
    // agent must not wait on them forever.
    for (const auto& p : left) {
      say("process pid=" + std::to_string(p.pid) + " (" + p.comm + ") still in state " + state_text(p.state) +
          " " + seconds(o_.kill_wait) + " after SIGKILL; leaving it");
    }
    finish();
  }

  // Exits the way the worker did, so the agent reports the worker's outcome.
  [[noreturn]] void finish() {
    report_oom_kill();  // before its cgroup, which may hold the count, goes
    // The usual end: the cgroup is empty and goes with one rmdir. What is
    // still in it (a process moved in from outside the tree) is killed first.
    if (cgroup_ && !cgroup_->remove()) cgroup_->kill_all();
    cgroup_.reset();
    if (!worker_done_) mirror_signal(SIGKILL);
    if (WIFEXITED(worker_status_)) ::_exit(WEXITSTATUS(worker_status_));
    mirror_signal(WIFSIGNALED(worker_status_) ? WTERMSIG(worker_status_) : SIGKILL);
  }

  [[noreturn]] static void mirror_signal(int sig) {
    struct rlimit no_core {};
    ::setrlimit(RLIMIT_CORE, &no_core);  // the worker dumped its own core, if any
    ::signal(sig, SIG_DFL);
    sigset_t only;
    ::sigemptyset(&only);
    ::sigaddset(&only, sig);
    ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
    ::raise(sig);
    ::_exit(signal_exit_code(sig));  // a signal whose default is to continue or stop
  }

  const GuardOptions& o_;
  const pid_t self_;
  const pid_t pgid_;
  std::unique_ptr<CgroupScope> cgroup_;
  OomWatch oom_;
  FenceDeadline fence_;
  pid_t worker_ = -1;
  bool worker_done_ = false;
  bool no_children_ = false;
  int worker_status_ = 0;
  bool stop_forwarded_ = false;
  Phase phase_ = Phase::kRunning;
  Clock::time_point deadline_{};
};

}  // namespace

sigset_t taken_signals() {
  sigset_t set;
  ::sigfillset(&set);
  for (int s : {SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS, SIGTSTP, SIGTTIN,
                SIGTTOU, SIGCONT}) {
    ::sigdelset(&set, s);
  }
  return set;
}

void run_guard(const GuardOptions& options) {
  Guard g(options);
  g.run();
}

}  // namespace ddp::guard
