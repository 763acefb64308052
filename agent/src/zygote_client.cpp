#include "zygote_client.hpp"

#include <poll.h>
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

namespace ddp::agent {

namespace {

bool send_with_fds(int conn, const std::string& text, const int (&fds)[3], std::string& error) {
  std::size_t done = 0;
  bool fds_sent = false;
  while (done < text.size()) {
    iovec iov{const_cast<char*>(text.data() + done), text.size() - done};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(fds))];
    if (!fds_sent) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(fds));
      std::memcpy(CMSG_DATA(c), fds, sizeof(fds));
    }
    const ssize_t n = ::sendmsg(conn, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = "send to the preload zygote: " + errno_text(errno);
      return false;
    }
    fds_sent = true;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// One line from `conn` (without '\n'), waiting at most `timeout`.
bool read_line(int conn, std::chrono::milliseconds timeout, std::string& line, std::string& error) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  line.clear();
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{conn, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::max<long>(0, left.count())));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      error = "the preload zygote did not answer within " + std::to_string(timeout.count()) + " ms";
      return false;
    }
    // One byte at a time: what follows the line (the exit line) stays unread
    // for the process runner. A reply is a few dozen bytes.
    char c = 0;
    const ssize_t got = ::read(conn, &c, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      error = "the preload zygote closed the connection without an answer";
      return false;
    }
    if (c == '\n') return true;
    if (line.size() >= json_input::kZygoteLine.max_bytes) {
      error = "the preload zygote sent an answer longer than " +
              std::to_string(json_input::kZygoteLine.max_bytes) + " bytes";
      return false;
    }
    line.push_back(c);
  }
}

// A pid in the zygote's answer: a positive integer that fits pid_t, else -1.
pid_t pid_field(const nlohmann::json& reply, const char* key) {
  const auto it = reply.find(key);
  if (it == reply.end() || !it->is_number_integer()) return -1;
  const auto v = it->get<std::int64_t>();  // an unsigned past int64 comes out negative
  return v > 0 && v <= std::numeric_limits<pid_t>::max() ? static_cast<pid_t>(v) : -1;
}

}  // namespace

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
                            {"stop_timeout_ms", request.stop_timeout.count()}};
  // Invalid UTF-8 in an env value must not throw: replace it, as Python would decode it anyway.
  const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  const int fds[3] = {in, out, err};
  if (!send_with_fds(conn, text, fds, r.error)) {
    r.nothing_started = true;  // a request cut short is malformed: the zygote forks nothing
    return r;
  }
  std::string line;
  if (!read_line(conn, timeout, line, r.error)) return r;
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
