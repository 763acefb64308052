#include "zygote_client.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "ddp/common/error.hpp"
#include "ddp/common/json_input.hpp"
#include "fd_passing.hpp"

namespace ddp::agent {

namespace {

const std::string kPeer = "preload zygote";

}  // namespace

pid_t pid_field(const nlohmann::json& reply, const char* key) {
  const auto it = reply.find(key);
  if (it == reply.end() || !it->is_number_integer()) return -1;
  const auto v = it->get<std::int64_t>();  // an unsigned past int64 comes out negative
  return v > 0 && v <= std::numeric_limits<pid_t>::max() ? static_cast<pid_t>(v) : -1;
}

int connect_zygote(const std::string& socket_path) {
  sockaddr_un addr{};
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

ZygoteReply request_worker(int conn, const ZygoteRequest& request, int in, int out, int err,
                           std::chrono::milliseconds timeout) {
  ZygoteReply r;
  const nlohmann::json j = {{"argv", request.argv},
                            {"env", request.env},
                            {"cwd", request.cwd},
                            {"guard", request.guard},
                            {"stop_timeout_ms", request.stop_timeout.count()},
                            {"session", request.session}};
  // Invalid UTF-8 in an env value must not throw: replace it, as Python would decode it anyway.
  const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  const int fds[3] = {in, out, err};
  if (!send_with_fds(conn, text, fds, kPeer, r.error)) {
    r.nothing_started = true;  // a request cut short is malformed: the zygote forks nothing
    return r;
  }
  std::string line;
  if (!read_line(conn, timeout, json_input::kZygoteLine.max_bytes, kPeer, line, r.error)) return r;
  std::string refused;
  const auto reply = try_parse_json(line, json_input::kZygoteLine, &refused);
  if (reply.is_discarded() || !reply.is_object()) {
    r.error = "the preload zygote sent a malformed answer" + (refused.empty() ? "" : ": it " + refused);
  } else if (const auto e = reply.find("error"); e != reply.end()) {
    // It answered, so it said what it did: an error means it started nothing.
    // An empty error must still be one: callers take an empty `error` for a
    // started worker and would signal its guard pid of -1, i.e. kill(-1, sig).
    r.error = e->is_string() ? e->get<std::string>() : "the preload zygote sent a malformed error";
    if (r.error.empty()) r.error = "the preload zygote refused to start the worker without saying why";
    r.nothing_started = true;
  } else if (const auto cg = reply.find("cgroup"); cg != reply.end() && !cg->is_string()) {
    r.error = "the preload zygote sent a malformed answer: its cgroup is not a string";
  } else {
    r.worker_pid = pid_field(reply, "pid");
    r.guard_pid = pid_field(reply, "guard_pid");
    if (cg != reply.end()) r.cgroup = cg->get<std::string>();
    if (r.worker_pid <= 0 || r.guard_pid <= 0) r.error = "the preload zygote sent no worker pid";
  }
  return r;
}

std::optional<int> parse_zygote_exit(const std::string& line) {
  const auto j = try_parse_json(line, json_input::kZygoteLine);
  if (j.is_discarded() || !j.is_object() || !j.contains("exit") || !j["exit"].is_number_integer()) {
    return std::nullopt;
  }
  // A wait status fits 16 bits; anything else is not one.
  const auto status = j["exit"].get<std::int64_t>();
  if (status < 0 || status > 0xffff) return std::nullopt;
  return static_cast<int>(status);
}

}  // namespace ddp::agent
