#include "fd_passing.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "ddp/common/error.hpp"

namespace ddp::agent {

bool send_with_fds(int conn, const std::string& text, std::span<const int> fds, const std::string& peer,
                   std::string& error) {
  std::size_t done = 0;
  bool fds_sent = fds.empty();
  std::vector<char> control(CMSG_SPACE(fds.size_bytes()));
  while (done < text.size()) {
    iovec iov{const_cast<char*>(text.data() + done), text.size() - done};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (!fds_sent) {
      msg.msg_control = control.data();
      msg.msg_controllen = control.size();
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(fds.size_bytes());
      std::memcpy(CMSG_DATA(c), fds.data(), fds.size_bytes());
    }
    const ssize_t n = ::sendmsg(conn, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = "send to the " + peer + ": " + errno_text(errno);
      return false;
    }
    fds_sent = true;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

bool read_line(int conn, std::chrono::milliseconds timeout, std::size_t max_bytes, const std::string& peer,
               std::string& line, std::string& error) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  line.clear();
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{conn, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::max<long>(0, left.count())));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      error = "the " + peer + " did not answer within " + std::to_string(timeout.count()) + " ms";
      return false;
    }
    // Up to the line's end and no further: what follows it (the exit line)
    // stays unread for the process runner. A peek finds the end, one read
    // takes the line: two calls for a reply of a few dozen bytes.
    char buf[512];
    const ssize_t seen = ::recv(conn, buf, sizeof(buf), MSG_PEEK);
    if (seen < 0 && errno == EINTR) continue;
    if (seen <= 0) {
      error = "the " + peer + " closed the connection without an answer";
      return false;
    }
    const auto* end = static_cast<const char*>(std::memchr(buf, '\n', static_cast<std::size_t>(seen)));
    const std::size_t take =
        end != nullptr ? static_cast<std::size_t>(end - buf) + 1 : static_cast<std::size_t>(seen);
    ssize_t got = -1;
    do {
      got = ::recv(conn, buf, take, 0);
    } while (got < 0 && errno == EINTR);
    if (got != static_cast<ssize_t>(take)) {
      error = "the " + peer + " closed the connection without an answer";
      return false;
    }
    line.append(buf, end != nullptr ? take - 1 : take);
    if (line.size() > max_bytes) {
      error = "the " + peer + " sent an answer longer than " + std::to_string(max_bytes) + " bytes";
      return false;
    }
    if (end != nullptr) return true;
  }
}

}  // namespace ddp::agent
