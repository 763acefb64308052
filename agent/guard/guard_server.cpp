#include "guard_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cgroup_scope.hpp"
#include "ddp/common/exit_code.hpp"
#include "guard.hpp"
#include "guard_protocol.hpp"
#include "guard_request.hpp"
#include "stale_cgroups.hpp"

extern char** environ;

namespace ddp::guard {

namespace {

// The fds attached to a request, in this order.
enum Attached { kIn, kOut, kErr, kInfo, kConn, kAttached };

// How long the rest of a frame may take to arrive once its length has: the
// agent writes a frame in one call, so only a dying agent is ever slower.
constexpr int kFrameTimeoutMs = 5000;

// The guards of one spawn share one look for stale cgroups beside theirs:
// the first guard of a spawn (none of the server's running) looks, and so
// does any guard asked for this long after the last look.
constexpr std::chrono::seconds kStaleReapInterval{1};

void close_all(std::vector<int>& fds) {
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
  fds.clear();
}

// Reads exactly n bytes (blocking, bounded by kFrameTimeoutMs of silence).
bool read_exact(int fd, char* buf, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, kFrameTimeoutMs);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    const ssize_t k = ::read(fd, buf + got, n - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    got += static_cast<std::size_t>(k);
  }
  return true;
}

// One frame: its length (with the fds attached to it), then its payload.
// False when the agent is gone or the frame is malformed: the server ends.
bool receive(int control, std::string& payload, std::vector<int>& fds, std::string& why) {
  std::uint32_t len = 0;
  alignas(cmsghdr) char control_buf[CMSG_SPACE(sizeof(int) * kAttached)];
  iovec iov{&len, sizeof(len)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control_buf;
  msg.msg_controllen = sizeof(control_buf);
  ssize_t n = -1;
  do {
    n = ::recvmsg(control, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  } while (n < 0 && errno == EINTR);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds.push_back(fd);
    }
  }
  if (n == 0) return false;  // the agent closed its end
  if (n != static_cast<ssize_t>(sizeof(len))) {
    why = "a request cut short";
    return false;
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0 || fds.size() != kAttached) {
    why = "a request with " + std::to_string(fds.size()) + " file descriptors instead of " +
          std::to_string(kAttached);
    return false;
  }
  if (len > kMaxRequestBytes) {
    why = "a request of " + std::to_string(len) + " bytes";
    return false;
  }
  payload.resize(len);
  if (!read_exact(control, payload.data(), len)) {
    why = "a request cut short";
    return false;
  }
  return true;
}

void send_line(int conn, const std::string& line) {
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::send(conn, line.data() + done, line.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the agent is gone or stopped reading: nobody waits for the line
    done += static_cast<std::size_t>(n);
  }
}

std::string json_escaped(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) >= 0x20) out.push_back(c);
  }
  return out;
}

// The wait status waitpid would have given, from waitid's report.
int wait_status(const siginfo_t& info) {
  switch (info.si_code) {
    case CLD_EXITED:
      return (info.si_status & 0xff) << 8;
    case CLD_DUMPED:
      return (info.si_status & 0x7f) | 0x80;
    default:
      return info.si_status & 0x7f;
  }
}

// Ends what the guard inherited from the server: the fds it does not own.
// (Its signal mask is already the guard's, so no signal in between can end
// it.) Async-signal-safe, between fork and run_guard().
void become_guard_process(const std::vector<int>& fds) {
  // Received fds are all above 2 (the server's own 0-2 are open).
  ::dup2(fds[kIn], 0);
  ::dup2(fds[kOut], 1);
  ::dup2(fds[kErr], 2);
  if (fds[kInfo] != 3) ::dup2(fds[kInfo], 3);  // cleared close-on-exec: the worker closes it
  if (::syscall(SYS_close_range, 4U, ~0U, 0U) != 0) {
    for (int fd = 4; fd < 65536; ++fd) ::close(fd);
  }
}

class Server {
 public:
  Server(int control, pid_t agent) : control_(control), agent_(agent), self_(::getpid()) {}

  [[noreturn]] void run() {
    // What reaches every process of a job (scancel's SIGTERM or --signal=USR1,
    // a kill of the agent's session) must not end the server: its guards
    // would kill their trees at once instead of forwarding the signal. Such
    // signals stay blocked and pending; only SIGCHLD is read.
    const sigset_t taken = taken_signals();
    ::sigprocmask(SIG_SETMASK, &taken, nullptr);
    sigset_t chld;
    ::sigemptyset(&chld);
    ::sigaddset(&chld, SIGCHLD);
    sigfd_ = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigfd_ < 0) die("signalfd: " + std::string(std::strerror(errno)));
    // Parent-death signal SIGKILL is set by the agent before our exec; it may
    // have died before that took effect.
    if (::getppid() != agent_) ::_exit(0);
    while (true) {
      std::vector<pollfd> fds{{control_, POLLIN, 0}, {sigfd_, POLLIN, 0}};
      for (const auto& g : guards_) fds.push_back({g.conn, g.conn >= 0 ? short(POLLIN) : short(0), 0});
      const int n = ::poll(fds.data(), fds.size(), -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) die("poll: " + std::string(std::strerror(errno)));
      if (fds[1].revents != 0) collect_exits();
      for (std::size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents != 0) agent_done(guards_[i - 2]);
      }
      std::erase_if(guards_, [](const Guard& g) { return g.reaped; });
      if (fds[0].revents != 0) serve_one();
    }
  }

 private:
  struct Guard {
    pid_t pid;
    int conn;  // -1 once the agent closed its end
    bool exited = false;
    bool reaped = false;
  };

  [[noreturn]] void die(const std::string& why) const {
    std::fprintf(stderr, "%sddp-guard server: %s; its guards stop their workers\n", kGuardLinePrefix.data(),
                 why.c_str());
    ::_exit(exit_code(ExitCode::kFailed));
  }

  void serve_one() {
    std::string payload;
    std::vector<int> fds;
    std::string why;
    if (!receive(control_, payload, fds, why)) {
      close_all(fds);
      if (why.empty()) ::_exit(0);  // the agent's end closed: its guards go with the server
      die("the agent sent " + why);
    }
    const int conn = fds[kConn];
    const auto request = decode_request(payload, &why);
    if (!request) {
      send_line(conn, "{\"error\": \"malformed request: " + json_escaped(why) + "\"}\n");
      close_all(fds);
      return;
    }
    reap_stale_siblings();
    const pid_t pid = ::fork();
    if (pid == 0) run_forked(*request, fds);
    if (pid < 0) {
      send_line(conn, "{\"error\": \"fork: " + json_escaped(std::strerror(errno)) + "\"}\n");
      close_all(fds);
      return;
    }
    send_line(conn, "{\"guard_pid\": " + std::to_string(pid) + "}\n");
    fds[kConn] = -1;
    close_all(fds);
    guards_.push_back({pid, conn});
  }

  // What an exec'd guard does before it makes its cgroup (guard.cpp), done
  // here for the guards this server forks: they start in this server's
  // cgroup, beside the same stale ones. Lines go to ddprun's stderr.
  void reap_stale_siblings() {
    const auto now = std::chrono::steady_clock::now();
    const bool spawn_running =
        std::any_of(guards_.begin(), guards_.end(), [](const Guard& g) { return !g.exited; });
    if (spawn_running && last_reap_ && now - *last_reap_ < kStaleReapInterval) return;
    last_reap_ = now;
    for (const auto& stale : reap_stale_guard_cgroups(own_cgroup_dir(), 1)) {
      if (worth_telling(stale))
        std::fprintf(stderr, "%s%s\n", kGuardLinePrefix.data(), describe(stale).c_str());
    }
  }

  // The forked guard: sets up what fork_exec sets up for an exec'd one, then
  // runs the guard. Its setup failures are reported as an exec failure is.
  [[noreturn]] void run_forked(const GuardRequest& r, std::vector<int>& fds) {
    ::close(control_);
    ::close(sigfd_);
    for (const auto& g : guards_) {
      if (g.conn >= 0) ::close(g.conn);
    }
    become_guard_process(fds);
    GuardOptions o;
    o.info_fd = 3;
    auto fail = [&](int err) {
      const std::string text = std::string(kInfoError) + " " + std::to_string(err) + "\n";
      [[maybe_unused]] const ssize_t w = ::write(o.info_fd, text.data(), text.size());
      ::_exit(exec_failed_exit_code());
    };
    // The group the agent signals; the guard leads it (and its session), as
    // when it is exec'd. Stdio is in place: the terminal can be taken.
    if (const int e = enter_session(r.session); e != 0) fail(e);
    if (::chdir(r.cwd.c_str()) != 0) fail(errno);
    if (r.cpus && ::sched_setaffinity(0, sizeof(cpu_set_t), &*r.cpus) != 0) fail(errno);
    static std::vector<char*> env;  // the worker's, from here on this process's own
    for (const auto& e : r.env) env.push_back(const_cast<char*>(e.c_str()));
    env.push_back(nullptr);
    environ = env.data();
    o.stop_timeout = r.stop_timeout;
    o.agent_pid = self_;  // the guard checks that its parent, this server, still lives
    o.argv = r.argv;
    o.fence_file = r.fence_file;
    o.reap_stale_siblings = false;  // reap_stale_siblings() just looked
    run_guard(o);
  }

  // Learns which guards exited, without reaping them (WNOWAIT): each pid stays
  // taken until the agent is done with it (agent_done).
  void collect_exits() {
    signalfd_siginfo si;
    while (::read(sigfd_, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
    }
    for (auto& g : guards_) {
      if (g.exited) continue;
      siginfo_t info{};
      if (::waitid(P_PID, static_cast<id_t>(g.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) continue;
      if (info.si_pid != g.pid) continue;
      g.exited = true;
      if (g.conn < 0) {
        reap(g);
      } else {
        send_line(g.conn, "{\"exit\": " + std::to_string(wait_status(info)) + "}\n");
      }
    }
  }

  // The agent closed its end of the guard's connection (it has the exit, or
  // gave up on the guard): the pid is not the agent's to signal any more.
  void agent_done(Guard& g) {
    ::close(g.conn);
    g.conn = -1;
    if (g.exited) reap(g);
  }

  static void reap(Guard& g) {
    while (::waitpid(g.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    g.reaped = true;
  }

  const int control_;
  const pid_t agent_;
  const pid_t self_;
  int sigfd_ = -1;
  std::vector<Guard> guards_;
  std::optional<std::chrono::steady_clock::time_point> last_reap_;  // reap_stale_siblings()
};

}  // namespace

void run_guard_server(int control_fd, pid_t agent_pid) {
  Server s(control_fd, agent_pid);
  s.run();
}

}  // namespace ddp::guard
