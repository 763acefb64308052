// Raw TCPStore-protocol clients for tests that speak the wire format byte by
// byte: the little-endian encoders torch's client uses, a blocking loopback
// connection with a receive timeout (so a missing reply fails the test
// instead of hanging it), and a real daemon to point them at. Header-only: every user is a Catch2 test and
// a failed connect or short send is a REQUIRE failure in that test.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace ddp::test {

// A u64 as torch writes it: 8 bytes, little-endian.
inline std::string u64(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}
inline std::string u32(std::uint32_t v) { return u64(v).substr(0, 4); }
// A length-prefixed string (u64 size, then the bytes).
inline std::string str(const std::string& s) { return u64(s.size()) + s; }
// One query-type byte.
inline std::string op(int b) { return std::string(1, static_cast<char>(b)); }
// The first 8 bytes of `b` read as a little-endian i64.
inline std::int64_t i64(const std::string& b) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[static_cast<std::size_t>(i)]);
  return static_cast<std::int64_t>(v);
}

// One TCP connection to 127.0.0.1:`port`. With `on_bound`, the socket is bound
// to an ephemeral loopback port first and `on_bound` is told that source port
// before the connect (for servers that tell clients apart by it).
class RawConn {
 public:
  explicit RawConn(int port, std::chrono::seconds recv_timeout = std::chrono::seconds(5),
                   const std::function<void(std::uint16_t)>& on_bound = {})
      : fd_(::socket(AF_INET, SOCK_STREAM, 0)), recv_timeout_(recv_timeout) {
    REQUIRE(fd_ >= 0);
    if (on_bound) {
      sockaddr_in self{};
      self.sin_family = AF_INET;
      self.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&self), sizeof(self)) == 0);
      socklen_t len = sizeof(self);
      REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&self), &len) == 0);
      on_bound(ntohs(self.sin_port));
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    set_recv_timeout(std::chrono::duration_cast<std::chrono::microseconds>(recv_timeout_));
  }
  ~RawConn() { ::close(fd_); }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  void send(const std::string& b) {
    REQUIRE(::send(fd_, b.data(), b.size(), MSG_NOSIGNAL) == ssize_t(b.size()));
  }
  // Up to `n` bytes: fewer when the peer closed or the receive timeout passed.
  std::string recv_exact(std::size_t n) {
    std::string s(n, '\0');
    std::size_t got = 0;
    while (got < n) {
      auto r = ::recv(fd_, s.data() + got, n - got, 0);
      if (r <= 0) break;
      got += static_cast<std::size_t>(r);
    }
    s.resize(got);
    return s;
  }
  // True when the server closed the connection (read returns 0 or reset).
  bool closed_by_peer() {
    char c;
    return ::recv(fd_, &c, 1, 0) <= 0;
  }
  // True when nothing has arrived (without waiting).
  bool nothing_pending() {
    char c;
    return ::recv(fd_, &c, 1, MSG_DONTWAIT) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  // True when a reply byte arrives within `wait` (left unread; a parked WAIT answers none).
  bool replied_within(std::chrono::milliseconds wait) {
    set_recv_timeout(wait);
    char c;
    const bool got = ::recv(fd_, &c, 1, MSG_PEEK) == 1;
    set_recv_timeout(std::chrono::duration_cast<std::chrono::microseconds>(recv_timeout_));
    return got;
  }

 private:
  void set_recv_timeout(std::chrono::microseconds t) {
    timeval tv{static_cast<time_t>(t.count() / 1000000), static_cast<suseconds_t>(t.count() % 1000000)};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }

  int fd_;
  std::chrono::seconds recv_timeout_;
};

// A real ddp-rendezvousd on 127.0.0.1 (port 0, read back from its port file)
// in its own temp dir, with `extra` flags; killed when this goes.
struct TcpStoreDaemon {
  explicit TcpStoreDaemon(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {bin("ddp-rendezvousd").string(), "--port", "0", "--port-file",
                                     (dir / "port").string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc = std::make_unique<Process>(argv, dir.path(), std::map<std::string, std::optional<std::string>>{},
                                     "daemon");
    port = wait_for_port_file(dir / "port");
    REQUIRE(port > 0);
  }
  // Whether the daemon's stderr shows `text` within `timeout` (its log lines
  // come after the reply that the test already saw).
  bool logs(const std::string& text, std::chrono::milliseconds timeout = std::chrono::seconds(5)) const {
    return wait_until([&] { return proc->err().find(text) != std::string::npos; }, timeout);
  }
  TempDir dir;
  std::unique_ptr<Process> proc;
  int port = 0;
};

}  // namespace ddp::test
