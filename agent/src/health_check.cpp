#include "health_check.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "containment.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/store/job_keys.hpp"
#include "ddp/store/store.hpp"
#include "fork_exec.hpp"
#include "guard_protocol.hpp"

extern char** environ;

namespace ddp::agent {

namespace {

using Clock = std::chrono::steady_clock;

// The command's stderr kept for its last line: the tail is enough.
constexpr std::size_t kStderrKeepBytes = 4096;
// Longest reason line passed on to the status record and the event log.
constexpr std::size_t kReasonMaxBytes = 300;

std::string ms_text(Clock::duration d) {
  const double ms = std::chrono::duration<double, std::milli>(d).count();
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f ms", ms);
  return buf;
}

std::string seconds_text(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

// How long a guard told to kill the check's tree may take to do so and exit:
// its own wait for processes to vanish after SIGKILL is 5 s (guard.hpp).
constexpr std::chrono::milliseconds kGuardExitWait{6000};

// The command's last line on stderr, skipping those its ddp-guard wrote
// (guard_protocol.hpp: "ddprun: worker pid=... exited; stopping ...").
std::string last_line(const std::string& text) {
  std::size_t end = text.size();
  while (true) {
    end = end == 0 ? std::string::npos : text.find_last_not_of("\r\n \t", end - 1);
    if (end == std::string::npos) return "";
    const std::size_t nl = text.rfind('\n', end);
    const std::size_t begin = nl == std::string::npos ? 0 : nl + 1;
    std::string line = text.substr(begin, end + 1 - begin);
    if (line.starts_with(guard::kGuardLinePrefix)) {
      end = begin;
      continue;
    }
    if (line.size() > kReasonMaxBytes) line = line.substr(0, kReasonMaxBytes) + "...";
    return line;
  }
}

// Waits up to `wait` for `pid` to exit and reaps it; false if it has not.
bool wait_exit(pid_t pid, std::chrono::milliseconds wait, int& status) {
  const auto until = Clock::now() + wait;
  while (true) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return true;
    if (Clock::now() >= until) return false;
    ::usleep(2000);
  }
}

// Writes one byte into an unnamed file in `dir`: what a worker's log needs.
std::string try_write(const std::filesystem::path& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  std::string named;
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    // A filesystem without O_TMPFILE: a named file, removed at once.
    named = (dir / ".ddprun-health-XXXXXX").string();
    fd = ::mkostemp(named.data(), O_CLOEXEC);
    if (fd >= 0) ::unlink(named.c_str());
  }
  if (fd < 0) return "cannot create a file: " + errno_text(errno);
  const char byte = 0;
  ssize_t n = -1;
  do {
    n = ::write(fd, &byte, 1);
  } while (n < 0 && errno == EINTR);
  const int err = errno;
  ::close(fd);
  if (n != 1) return "cannot write a file: " + errno_text(n < 0 ? err : ENOSPC);
  return "";
}

}  // namespace

std::string check_dir(const std::filesystem::path& dir, std::uint64_t min_free_mb, const std::string& flag) {
  const std::string head = flag + " " + dir.string() + ": ";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return head + "cannot open the directory: " + errno_text(errno);
  struct statvfs vfs {};
  const int rc = ::fstatvfs(fd, &vfs);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return head + "cannot stat the filesystem: " + errno_text(err);
  const std::uint64_t free_mb = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize / (1024 * 1024);
  if (free_mb < min_free_mb) {
    return head + std::to_string(free_mb) +
           " MiB free, below --health_min_free_mb=" + std::to_string(min_free_mb);
  }
  if (auto why = try_write(dir); !why.empty()) return head + why;
  return "";
}

HealthCheck::HealthCheck(const AgentConfig& cfg) : cfg_(cfg) {}

HealthCheck::~HealthCheck() { cancel(); }

void HealthCheck::cancel() {
  cancelled_ = true;
  const pid_t pg = running_.load();
  if (pg <= 0) return;
  // A guard kills the whole tree, what left the group included, then exits.
  if (guarded_) {
    ::kill(pg, guard::kill_now_signal());
  } else {
    ::kill(-pg, SIGKILL);
  }
}

HealthVerdict HealthCheck::run(store::Store* store) {
  std::string note;  // the GPU and store checks', whatever comes after them
  const auto keep_note = [&](const HealthVerdict& v) {
    if (!v.note.empty()) note += (note.empty() ? "" : "; ") + v.note;
  };
  HealthVerdict v = check_paths();
  if (v.healthy()) {
    v = check_gpus();
    keep_note(v);
  }
  if (v.healthy() && store != nullptr) {
    v = check_store(*store);
    keep_note(v);
  }
  if (v.healthy() && !cfg_.health.command.empty()) v = run_command();
  v.note = std::move(note);
  return v;
}

HealthVerdict HealthCheck::check_paths() {
  const auto& h = cfg_.health;
  if (!cfg_.log_dir.empty()) {
    if (auto why = check_dir(cfg_.log_dir, h.min_free_mb, "--log_dir"); !why.empty())
      return {"path", why, ""};
  }
  for (const auto& p : h.paths) {
    if (auto why = check_dir(p, h.min_free_mb, "--health_paths"); !why.empty()) return {"path", why, ""};
  }
  return {};
}

HealthVerdict HealthCheck::check_gpus() {
  const auto& h = cfg_.health;
  if (h.gpus == 0) return {};
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::optional<std::string> visible = cvd != nullptr ? std::optional<std::string>(cvd) : std::nullopt;
  // CUDA_VISIBLE_DEVICES= (or -1): the job runs without GPUs.
  const bool hidden = visible && (visible->empty() || *visible == "-1" || *visible == "NoDevFiles");
  if (h.gpus == HealthConfig::kAutoGpus && hidden) return {};
  if (!nvml_.load()) {
    if (h.gpus != HealthConfig::kAutoGpus) {
      return {"gpus", "--health_gpus=" + std::to_string(h.gpus) + " but " + nvml_.unavailable(), ""};
    }
    // Not news on a machine without an NVIDIA driver (a laptop, a CPU job):
    // a debug line, once per run.
    if (!nvml_noted_) {
      nvml_noted_ = true;
      log::get("agent")->debug("no GPU check: {}", nvml_.unavailable());
    }
    return {};
  }
  const auto found = nvml_.visible(visible);
  if (!found.error.empty()) return {"gpus", found.error, ""};
  const std::string where = visible ? " (CUDA_VISIBLE_DEVICES=" + *visible + ")" : "";
  if (h.gpus != HealthConfig::kAutoGpus) {
    if (found.count >= h.gpus) return {};
    return {"gpus",
            std::to_string(found.count) + " GPU(s) visible" + where +
                ", fewer than --health_gpus=" + std::to_string(h.gpus),
            ""};
  }
  // auto: a GPU per worker, as far as the node had them at its first check.
  // Fewer GPUs than workers from the start is a job that shares GPUs or uses
  // none (gloo on a GPU node, as torchrun runs it), not a fault; a GPU gone
  // since then is.
  HealthVerdict v;
  if (!gpus_at_start_) {
    gpus_at_start_ = found.count;
    if (found.count < cfg_.nproc_per_node) {
      v.note = std::to_string(found.count) + " GPU(s) visible" + where +
               " for --nproc_per_node=" + std::to_string(cfg_.nproc_per_node) +
               ": the workers share them or use none (--health_gpus=" + std::to_string(cfg_.nproc_per_node) +
               " would keep such a node out)";
    }
  }
  const int want = std::min(cfg_.nproc_per_node, *gpus_at_start_);
  if (found.count >= want) return v;
  const std::string bound = want == cfg_.nproc_per_node
                                ? "--nproc_per_node=" + std::to_string(want)
                                : "the " + std::to_string(want) + " this node had at its first check";
  return {"gpus",
          std::to_string(found.count) + " GPU(s) visible" + where + ", fewer than " + bound +
              " (--health_gpus=auto)",
          ""};
}

HealthVerdict HealthCheck::check_store(store::Store& store) {
  const auto start = Clock::now();
  try {
    store.check({store::keys::agent_status_key(cfg_.rendezvous.run_id, cfg_.node.node_id)});
  } catch (const std::exception& e) {
    // Not this node's fault as far as it can tell (the store may be down for
    // every node): the rendezvous meets the same error and says so, exit 3.
    return {"", "", "no store check: the store does not answer (" + std::string(e.what()) + ")"};
  }
  const auto rtt = Clock::now() - start;
  const auto bound = cfg_.health.max_store_rtt;
  if (bound.count() > 0 && rtt > bound) {
    return {
        "store",
        "store round trip " + ms_text(rtt) + ", over --health_store_rtt_ms=" + std::to_string(bound.count()),
        ""};
  }
  return {};
}

HealthVerdict HealthCheck::run_command() {
  const auto& h = cfg_.health;
  if (cancelled_) return {"command", "cancelled", ""};
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return {"command", "pipe: " + errno_text(errno), ""};
  // Only our end is non-blocking: the command's stderr stays an ordinary one.
  ::fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
  const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  ExecSpec spec;
  spec.executable = "/bin/sh";
  spec.args = {"-c", h.command};
  // Contained as a worker is (containment.hpp): under its own ddp-guard, a
  // subreaper with a cgroup, so a setsid child or a double-fork daemon of the
  // check is killed with it, not only its process group.
  const std::string& guard_exe = guard_executable();
  const bool guarded = !guard_exe.empty();
  if (guarded) {
    spec.args = {guard::kStopTimeoutFlag + std::string("0"),
                 guard::kAgentPidFlag + std::to_string(::getpid()),
                 "--",
                 "/bin/sh",
                 "-c",
                 h.command};
    spec.executable = guard_exe;
  }
  for (char** e = environ; *e != nullptr; ++e) spec.env.emplace_back(*e);
  spec.in = null_fd;
  spec.out = null_fd;
  spec.err = pipefd[1];
  spec.agent_pid = ::getpid();
  const auto start = Clock::now();
  const auto deadline = start + h.command_timeout;
  const auto launched = fork_exec(spec, h.command_timeout, ExecCancel{});
  ::close(pipefd[1]);
  if (null_fd >= 0) ::close(null_fd);
  if (launched.pid <= 0) {
    ::close(pipefd[0]);
    return {"command", "--health_check could not start: " + launched.error, ""};
  }
  const pid_t pid = launched.pid;
  guarded_ = guarded;
  running_ = pid;
  if (cancelled_) cancel();  // cancel() ran between the checks and now

  std::string err_text;
  bool eof = false;
  bool exited = false;
  bool timed_out = false;
  int status = 0;
  const auto drain = [&] {
    char buf[4096];
    while (true) {
      const ssize_t n = ::read(pipefd[0], buf, sizeof(buf));
      if (n > 0) {
        err_text.append(buf, static_cast<std::size_t>(n));
        if (err_text.size() > 2 * kStderrKeepBytes) err_text.erase(0, err_text.size() - kStderrKeepBytes);
        continue;
      }
      if (n == 0) eof = true;
      if (n < 0 && errno == EINTR) continue;
      return;
    }
  };
  while (true) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      drain();  // what the command wrote; a child it left behind may keep the pipe open
      break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    // Wake on output or EOF; otherwise look at the child every few ms.
    pollfd pfd{pipefd[0], POLLIN, 0};
    const int wait_ms = static_cast<int>(std::min<long long>(left.count(), eof ? 2 : 20));
    if (!eof && ::poll(&pfd, 1, wait_ms) > 0) {
      drain();
    } else if (eof) {
      ::usleep(static_cast<useconds_t>(wait_ms) * 1000);
    }
  }
  if (guarded) {
    // An exited guard has killed what the command left; else it is told to.
    if (!exited) {
      ::kill(pid, guard::kill_now_signal());
      if (!wait_exit(pid, kGuardExitWait, status)) {
        ::kill(-pid, SIGKILL);
        reap_killed(pid);
      }
    }
  } else {
    // The command's process group goes, whatever it left running.
    ::kill(-pid, SIGKILL);
    if (!exited) reap_killed(pid);
  }
  running_ = 0;
  ::close(pipefd[0]);

  if (cancelled_ && !exited) return {"command", "cancelled", ""};
  if (timed_out) {
    return {"command",
            "--health_check did not finish within --health_check_timeout=" + seconds_text(h.command_timeout) +
                "; killed" + (last_line(err_text).empty() ? "" : " (" + last_line(err_text) + ")"),
            ""};
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
  const std::string how = WIFEXITED(status) ? "exited with " + std::to_string(WEXITSTATUS(status))
                                            : "killed by signal " + std::to_string(WTERMSIG(status));
  const std::string why = last_line(err_text);
  return {"command", "--health_check " + how + (why.empty() ? "" : ": " + why), ""};
}

}  // namespace ddp::agent
