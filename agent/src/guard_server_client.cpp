#include "guard_server_client.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "ddp/agent/failure_report.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/json_input.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/common/parse.hpp"
#include "fd_passing.hpp"
#include "fork_exec.hpp"
#include "guard_protocol.hpp"
#include "zygote_client.hpp"

namespace ddp::agent {

namespace {

const std::string kPeer = "guard server";
// How long the server may take to exec.
constexpr std::chrono::milliseconds kServerExecTimeout{5000};

// The guard's pid in the server's answer ({"guard_pid": N}), else the error it
// sent or a description of what was wrong.
pid_t parse_guard_pid(const std::string& line, std::string& error) {
  const auto j = try_parse_json(line, json_input::kZygoteLine);
  if (j.is_object()) {
    if (const pid_t pid = pid_field(j, "guard_pid"); pid > 0) return pid;
    if (const auto it = j.find("error"); it != j.end() && it->is_string()) {
      error = "the " + kPeer + " started no guard: " + it->get<std::string>();
      return -1;
    }
  }
  error = "the " + kPeer + " sent a malformed answer";
  return -1;
}

}  // namespace

bool guard_server_enabled() {
  // Read once: the environment is the agent's own and does not change.
  static const bool enabled = [] {
    const char* v = std::getenv("DDP_GUARD_SERVER");
    if (v == nullptr) return true;
    const auto on = parse_bool(v);
    if (!on) {
      log::get("agent")->warn(
          "DDP_GUARD_SERVER='{}' is not a boolean (0/1, false/true, no/yes, off/on): "
          "the guard server stays on",
          v);
    }
    return on.value_or(true);
  }();
  return enabled;
}

GuardServer::GuardServer(std::string guard_executable) : exe_(std::move(guard_executable)) {}

GuardServer::~GuardServer() { stop(); }

void GuardServer::stop() {
  if (control_ >= 0) ::close(control_);
  control_ = -1;
  if (pid_ > 0) {
    // EOF on its socket ends it; a stopped or stuck one is not waited for.
    ::kill(pid_, SIGKILL);
    reap_killed(pid_);
  }
  pid_ = -1;
}

bool GuardServer::reap_if_gone() {
  if (pid_ <= 0) return false;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == 0) return false;
  log::get("agent")->warn("ddp-guard server (pid {}) ended ({}): starting another for the next workers", pid_,
                          r == pid_ ? describe_wait_status(status) : "reaped elsewhere");
  ::close(control_);
  control_ = -1;
  pid_ = -1;
  return true;
}

bool GuardServer::start() {
  reap_if_gone();
  if (pid_ > 0) return true;
  if (given_up_) return false;
  std::string error;
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    error = "socketpair: " + errno_text(errno);
  } else {
    const int null_in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ExecSpec spec;
    spec.executable = exe_;
    spec.args = {guard::kServeFdFlag + std::to_string(pair[1]),
                 guard::kAgentPidFlag + std::to_string(::getpid())};
    spec.in = null_in;
    spec.keep_fd = pair[1];
    spec.agent_pid = ::getpid();
    const ForkExecResult r = fork_exec(spec, kServerExecTimeout, ExecCancel{});
    if (null_in >= 0) ::close(null_in);
    ::close(pair[1]);
    if (r.pid > 0) {
      pid_ = r.pid;
      control_ = pair[0];
      return true;
    }
    ::close(pair[0]);
    error = r.error;
  }
  given_up_ = true;
  log::get("agent")->warn("cannot start the ddp-guard server ({}): each worker's guard is exec'd instead",
                          error);
  return false;
}

GuardServer::Started GuardServer::start_guard(const guard::GuardRequest& request, int in, int out, int err,
                                              int info, std::chrono::milliseconds timeout) {
  Started s;
  const std::string payload = guard::encode_request(request);
  if (payload.size() > guard::kMaxRequestBytes) {
    s.error = "the worker's arguments and environment take " + std::to_string(payload.size()) + " bytes";
    s.nothing_started = true;
    return s;
  }
  const auto len = static_cast<std::uint32_t>(payload.size());
  std::string frame(reinterpret_cast<const char*>(&len), sizeof(len));
  frame += payload;
  // A server that died since the last guard is replaced once, here.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!start()) {
      s.error = "no " + kPeer;
      s.nothing_started = true;
      return s;
    }
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
      s.error = "socketpair: " + errno_text(errno);
      s.nothing_started = true;
      return s;
    }
    const int fds[5] = {in, out, err, info, pair[1]};
    std::string error;
    const bool sent = send_with_fds(control_, frame, fds, kPeer, error);
    ::close(pair[1]);
    if (!sent) {
      // A frame cut short is one the server refuses whole: it started nothing.
      ::close(pair[0]);
      if (reap_if_gone() && attempt == 0) continue;
      stop();
      s.error = error;
      s.nothing_started = true;
      return s;
    }
    std::string line;
    if (!read_line(pair[0], timeout, json_input::kZygoteLine.max_bytes, kPeer, line, error)) {
      // It may have forked the guard, so the worker is not started again. A
      // stuck server goes, and its guards with it; no other is tried.
      ::close(pair[0]);
      log::get("agent")->warn("{} (pid {}): killed it; each worker's guard is exec'd from now on", error,
                              pid_);
      stop();
      given_up_ = true;
      s.error = error;
      return s;
    }
    s.guard_pid = parse_guard_pid(line, s.error);
    if (s.guard_pid < 0) {
      ::close(pair[0]);
      s.nothing_started = true;
      return s;
    }
    s.conn = pair[0];
    return s;
  }
  return s;
}

}  // namespace ddp::agent
