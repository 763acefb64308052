// Hostile or foreign TCPStore-protocol clients lose only their own connection,
// and the daemon's log says which op or what it could not read. Raw sockets,
// no torch needed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "test_support.hpp"

using namespace ddp::test;
using namespace std::chrono_literals;

namespace {

struct Conn {
  explicit Conn(int port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~Conn() { ::close(fd); }
  void send(const std::string& b) {
    REQUIRE(::send(fd, b.data(), b.size(), MSG_NOSIGNAL) == ssize_t(b.size()));
  }
  // True when the server closed the connection (read returns 0 or reset).
  bool closed_by_peer() {
    char c;
    return ::recv(fd, &c, 1, 0) <= 0;
  }
  std::string recv_exact(std::size_t n) {
    std::string s(n, '\0');
    std::size_t got = 0;
    while (got < n) {
      auto r = ::recv(fd, s.data() + got, n - got, 0);
      if (r <= 0) break;
      got += static_cast<std::size_t>(r);
    }
    s.resize(got);
    return s;
  }
  int fd;
};

std::string u64(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}
std::string str(const std::string& s) { return u64(s.size()) + s; }

// A well-behaved torch 1.x client (raw): ADD "/ok" 1 must answer 8 bytes.
void check_served(int port) {
  Conn good(port);
  good.send('\x03' + str("/ok") + u64(1));
  CHECK(good.recv_exact(8).size() == 8);
}

}  // namespace

TEST_CASE(
    "a TCPStore client sending an unknown op, an oversized or a truncated request loses only its "
    "connection") {
  TempDir dir;
  Process d({bin("ddp-rendezvousd").string(), "--port", "0", "--port-file", (dir / "port").string()},
            dir.path(), {}, "daemon");
  const int port = wait_for_port_file(dir / "port");
  REQUIRE(port > 0);

  Conn unknown(port);
  unknown.send('\x00' + str("/a") + str("1") + '\x09');  // torch 1.x SET, then type 9
  CHECK(unknown.closed_by_peer());
  check_served(port);

  Conn oversized(port);
  oversized.send('\x02' + u64(1ULL << 40));  // GET with a 1 TiB key
  CHECK(oversized.closed_by_peer());
  check_served(port);

  {
    Conn truncated(port);
    truncated.send('\x00' + u64(100) + "short");  // vanishes mid-request
  }
  check_served(port);

  Conn bad_magic(port);  // a 2.x-looking VALIDATE with the wrong magic
  bad_magic.send(std::string("\x00\xCE\xF7\x85\x3D", 5));
  check_served(port);

  CHECK(wait_until([&] { return d.err().find("query type 9") != std::string::npos; }, 5s));
  CHECK_THAT(d.err(), Catch::Contains("exceeds the limit"));
}

TEST_CASE("a torch 2.x client is validated and answered to its ping") {
  TempDir dir;
  Process d({bin("ddp-rendezvousd").string(), "--port", "0", "--port-file", (dir / "port").string()},
            dir.path(), {}, "daemon");
  const int port = wait_for_port_file(dir / "port");
  Conn c(port);
  c.send(std::string("\x00\xCE\xF7\x85\x3C", 5) +
         std::string("\x0D\x2A\x00\x00\x00", 5));  // VALIDATE, PING 42
  CHECK(c.recv_exact(4) == std::string("\x2A\x00\x00\x00", 4));
  c.send('\x04' + str("/n") + u64(7));  // 2.x ADD
  CHECK(c.recv_exact(8) == u64(7));
  c.send('\x0A' + u64(1) + str("/n"));  // MULTI_GET
  CHECK(c.recv_exact(9) == str("7"));
}

TEST_CASE("a server that requires a token refuses TCPStore clients with a clear log line") {
  TempDir dir;
  write_file(dir / "token", "s3cret\n");
  Process d({bin("ddp-rendezvousd").string(), "--port", "0", "--port-file", (dir / "port").string(),
             "--token-file", (dir / "token").string()},
            dir.path(), {}, "daemon");
  const int port = wait_for_port_file(dir / "port");
  Conn c(port);
  c.send('\x03' + str("/n") + u64(1));
  CHECK(c.closed_by_peer());
  CHECK(wait_until([&] { return d.err().find("requires a token") != std::string::npos; }, 5s));
}
