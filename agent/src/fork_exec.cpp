#include "fork_exec.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <thread>

#include "ddp/common/error.hpp"
#include "ddp/common/exit_code.hpp"
#include "worker_session.hpp"

namespace ddp::agent {

namespace {

using Clock = std::chrono::steady_clock;

// Which step of the child's setup failed, sent back with its errno.
enum class Step : int { kSetpgid, kSetsid, kPdeathsig, kStdio, kAffinity, kExec };

const char* step_name(Step s) {
  switch (s) {
    case Step::kSetpgid:
      return "setpgid";
    case Step::kSetsid:
      return "setsid";
    case Step::kPdeathsig:
      return "prctl(PR_SET_PDEATHSIG)";
    case Step::kStdio:
      return "dup2";
    case Step::kAffinity:
      return "sched_setaffinity";
    case Step::kExec:
      return "exec";
  }
  return "setup";
}

struct ChildReport {
  int step = 0;
  int err = 0;
};

// Everything the child touches, prepared before the fork.
struct Prepared {
  const char* path;
  char* const* argv;
  char* const* envp;
  int stdio[3];
  int keep_fd;
  const cpu_set_t* cpus;
  pid_t agent_pid;
  int session;
  int report_fd;
  bool stop_before_exec;
};

[[noreturn]] void fail(const Prepared& p, Step step) {
  const ChildReport r{static_cast<int>(step), errno};
  // Nothing to do if this fails: the parent then sees EOF and a 127 exit.
  [[maybe_unused]] const ssize_t n = ::write(p.report_fd, &r, sizeof(r));
  ::_exit(exec_failed_exit_code());
}

// The child, between fork and exec: async-signal-safe calls only, no
// allocation, no locks, no exceptions.
[[noreturn]] void run_child(const Prepared& p) {
  // The agent's handlers must not run in this copy of it, and what the agent
  // ignores (SIGPIPE) must not stay ignored past exec.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    // glibc keeps the two below SIGRTMIN for itself and refuses them (EINVAL):
    // skipped, so that no call here fails and writes errno (see spawn_child).
    if (sig == SIGKILL || sig == SIGSTOP || (sig > SIGSYS && sig < SIGRTMIN)) continue;
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0) continue;  // a signal number glibc reserves
    // Already default: nothing to set (most signals; one system call saved each).
    if (old.sa_handler == SIG_DFL) continue;
    if (sig == SIGPIPE || old.sa_handler != SIG_IGN) ::sigaction(sig, &dfl, nullptr);
  }
  // The session first: its controlling terminal is taken once stdio is in place.
  if (const int e = guard::enter_session(p.session == guard::kSessionShared ? p.session : guard::kSessionOwn);
      e != 0) {
    errno = e;
    fail(p, p.session == guard::kSessionShared ? Step::kSetpgid : Step::kSetsid);
  }
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(p, Step::kPdeathsig);
  // The agent may have died before prctl took effect: then nobody would kill us.
  if (::getppid() != p.agent_pid) ::_exit(signal_exit_code(SIGKILL));
  // A source fd among 0-2 would be overwritten by an earlier dup2: move it up first.
  int src[3] = {p.stdio[0], p.stdio[1], p.stdio[2]};
  for (int i = 0; i < 3; ++i) {
    if (src[i] >= 0 && src[i] < 3 && src[i] != i && (src[i] = ::fcntl(src[i], F_DUPFD, 3)) < 0) {
      fail(p, Step::kStdio);
    }
  }
  for (int i = 0; i < 3; ++i) {
    if (src[i] < 0) continue;
    if (src[i] == i) {
      ::fcntl(i, F_SETFD, 0);
    } else if (::dup2(src[i], i) < 0) {
      fail(p, Step::kStdio);
    }
  }
  // Every fd the agent holds but 0-2 closes at exec, whatever opened it.
  if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    struct rlimit lim {};
    const long max_fd = ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < 65536
                            ? static_cast<long>(lim.rlim_cur)
                            : 65536;
    for (int fd = 3; fd < max_fd; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  if (p.keep_fd >= 0) ::fcntl(p.keep_fd, F_SETFD, 0);
  if (p.session >= 0) ::ioctl(p.session, TIOCSCTTY, 0);  // see enter_session
  if (p.cpus != nullptr && ::sched_setaffinity(0, sizeof(cpu_set_t), p.cpus) != 0) fail(p, Step::kAffinity);
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (p.stop_before_exec) ::kill(::getpid(), SIGSTOP);
  ::execve(p.path, p.argv, p.envp);
  fail(p, Step::kExec);
}

int child_main(void* arg) { run_child(*static_cast<const Prepared*>(arg)); }

// The child's own stack: run_child needs a few hundred bytes; the rest is
// margin, and the page below it is unmapped, so an overflow faults in the
// child instead of writing into our memory.
constexpr std::size_t kChildStackBytes = 64 * 1024;
constexpr std::size_t kGuardPageBytes = 4096;

// The sanitizers' interceptors (sigaction, dup2, ...) keep state in the
// process's memory, which a child sharing it would change under the agent:
// sanitized builds fork as before.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)  // GCC
#define DDP_FORK_EXEC_SANITIZED 1
#elif defined(__has_feature)  // Clang
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DDP_FORK_EXEC_SANITIZED 1
#endif
#endif
#ifdef DDP_FORK_EXEC_SANITIZED
constexpr bool kShareMemory = false;
#else
constexpr bool kShareMemory = true;
#endif

// Starts run_child(p) in a child that shares our memory until its exec
// (CLONE_VM), as posix_spawn does: no page table is copied, no page is
// copied on write, and the exec drops a reference instead of tearing down a
// copy of the agent's address space (8 spawns: ~0.3 ms of CPU each, measured,
// docs/data/performance-history.md "Launch floor"). Unlike vfork, this thread is not
// suspended, so the exec wait below keeps its deadline and its cancel.
// The child runs on `stack` with this thread's thread pointer: its failing
// calls would write this thread's errno, so until the child has exec'd or
// exited the caller reads no errno (fork_exec below), and on the way to a
// successful exec the child makes no call that fails (but for the
// close_range fallback of kernels before 5.11, and a TIOCSCTTY refused).
// `p`, what it points to and `stack` must outlive the child's exec or exit.
pid_t spawn_child(const Prepared& p, void* stack) {
  if (!kShareMemory) {
    const pid_t pid = ::fork();
    if (pid == 0) run_child(p);
    return pid;
  }
  char* top = static_cast<char*>(stack) + kGuardPageBytes + kChildStackBytes;
  return ::clone(child_main, top, CLONE_VM | SIGCHLD, const_cast<Prepared*>(&p));
}

struct ChildStack {
  static constexpr std::size_t kBytes = kGuardPageBytes + kChildStackBytes;
  void* base = MAP_FAILED;
  ChildStack() {
    base = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (base != MAP_FAILED && ::mprotect(base, kGuardPageBytes, PROT_NONE) != 0) {
      ::munmap(base, kBytes);
      base = MAP_FAILED;
    }
  }
  ~ChildStack() {
    if (base != MAP_FAILED) ::munmap(base, kBytes);
  }
  ChildStack(const ChildStack&) = delete;
  ChildStack& operator=(const ChildStack&) = delete;
};

// `first` (when given), then `v`, then the null that ends an argv or envp.
std::vector<char*> c_strings(const std::vector<std::string>& v, const std::string* first = nullptr) {
  std::vector<char*> out;
  out.reserve(v.size() + 2);
  if (first != nullptr) out.push_back(const_cast<char*>(first->c_str()));
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Kills a child that did not exec (or was cancelled) and reaps it.
void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  reap_killed(pid);
}

}  // namespace

void reap_killed(pid_t pid) {
  // Normally gone within a millisecond of SIGKILL; one stuck in the kernel
  // (uninterruptible sleep) must not hold up the spawner thread.
  constexpr std::chrono::milliseconds kWait{50};
  // Its pidfd turns readable the moment it exits (Linux 5.3+); else poll.
  if (const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    while (::poll(&p, 1, static_cast<int>(kWait.count())) < 0 && errno == EINTR) {
    }
    ::close(pidfd);
  }
  const auto until = Clock::now() + kWait;
  while (true) {
    const pid_t r = ::waitpid(pid, nullptr, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return;
    if (Clock::now() >= until) break;
    ::usleep(1000);
  }
  std::thread([pid] {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }).detach();
}

ForkExecResult fork_exec(const ExecSpec& spec, std::chrono::milliseconds timeout, const ExecCancel& cancel) {
  ForkExecResult result;
  // Declared first: destroyed last, after the child has exec'd or is gone.
  const ChildStack stack;
  if (stack.base == MAP_FAILED) {
    result.error = "mmap of the child's stack: " + errno_text(errno);
    return result;
  }
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    result.error = "pipe: " + errno_text(errno);
    return result;
  }
  auto argv = c_strings(spec.args, &spec.executable);
  auto envp = c_strings(spec.env);
  const Prepared prepared{spec.executable.c_str(),
                          argv.data(),
                          envp.data(),
                          {spec.in, spec.out, spec.err},
                          spec.keep_fd,
                          spec.cpus,
                          spec.agent_pid,
                          spec.session,
                          report[1],
                          spec.stop_before_exec};
  // No signal handler may run in the child before it has reset them all.
  sigset_t all;
  sigset_t old;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = spawn_child(prepared, stack.base);
  const int fork_errno = errno;  // read only when no child exists
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::close(report[1]);
  if (pid < 0) {
    ::close(report[0]);
    result.error = "clone: " + errno_text(fork_errno);
    return result;
  }

  // EOF on the report pipe: the exec succeeded (the pipe is close-on-exec).
  const auto deadline = Clock::now() + timeout;
  ChildReport r;
  std::size_t got = 0;
  bool done = false;
  while (!done) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      result.error = "it did not exec within " + std::to_string(timeout.count()) + " ms; killed pid " +
                     std::to_string(pid);
      break;
    }
    pollfd fds[2] = {{report[0], POLLIN, 0}, {cancel.fd, POLLIN, 0}};
    // Until the child has exec'd it may write our errno (spawn_child): a
    // failed poll or read is retried, the deadline bounds the retries.
    const int n = ::poll(fds, cancel.fd >= 0 ? 2 : 1, static_cast<int>(left.count()));
    if (n <= 0) continue;
    if (cancel.fd >= 0 && (fds[1].revents & POLLIN) != 0) {
      std::uint64_t count = 0;
      [[maybe_unused]] const ssize_t drained = ::read(cancel.fd, &count, sizeof(count));
      if (cancel.is_cancelled && cancel.is_cancelled()) {
        result.cancelled = true;
        result.error = "cancelled before it exec'd";
        break;
      }
    }
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    const ssize_t k = ::read(report[0], reinterpret_cast<char*>(&r) + got, sizeof(r) - got);
    if (k < 0) continue;
    if (k > 0) {
      got += static_cast<std::size_t>(k);
      done = got == sizeof(r);
      continue;
    }
    done = true;  // EOF
  }
  ::close(report[0]);
  if (!done) {
    kill_and_reap(pid);
    return result;
  }
  if (got == sizeof(r)) {
    ::waitpid(pid, nullptr, 0);  // it has reported and is exiting
    result.error = std::string(step_name(static_cast<Step>(r.step))) + ": " + errno_text(r.err);
    return result;
  }
  if (got > 0) {
    // A torn report: the child died while writing it.
    kill_and_reap(pid);
    result.error = "the child died before exec";
    return result;
  }
  result.pid = pid;
  return result;
}

}  // namespace ddp::agent
