// Hostile or foreign TCPStore-protocol clients lose only their own connection,
// and the daemon's log says which op or what it could not read. Raw sockets,
// no torch needed.
#include <catch2/catch.hpp>

#include "raw_tcpstore.hpp"
#include "test_support.hpp"

using namespace ddp::test;
using namespace std::chrono_literals;

namespace {

// A well-behaved torch 1.x client (raw): ADD "/ok" 1 must answer 8 bytes.
void check_served(int port) {
  RawConn good(port);
  good.send('\x03' + str("/ok") + u64(1));
  CHECK(good.recv_exact(8).size() == 8);
}

}  // namespace

TEST_CASE(
    "a TCPStore client sending an unknown op, an oversized or a truncated request loses only its "
    "connection") {
  TcpStoreDaemon d;
  const int port = d.port;

  RawConn unknown(port);
  unknown.send('\x00' + str("/a") + str("1") + '\x09');  // torch 1.x SET, then type 9
  CHECK(unknown.closed_by_peer());
  check_served(port);

  RawConn oversized(port);
  oversized.send('\x02' + u64(1ULL << 40));  // GET with a 1 TiB key
  CHECK(oversized.closed_by_peer());
  check_served(port);

  {
    RawConn truncated(port);
    truncated.send('\x00' + u64(100) + "short");  // vanishes mid-request
  }
  check_served(port);

  RawConn bad_magic(port);  // a 2.x-looking VALIDATE with the wrong magic
  bad_magic.send(std::string("\x00\xCE\xF7\x85\x3D", 5));
  check_served(port);

  CHECK(d.logs("query type 9"));
  CHECK_THAT(d.proc->err(), Catch::Contains("exceeds the limit"));
}

TEST_CASE("a torch 2.x client is validated and answered to its ping") {
  TcpStoreDaemon d;
  RawConn c(d.port);
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
  TcpStoreDaemon d({"--token-file", (dir / "token").string()});
  RawConn c(d.port);
  c.send('\x03' + str("/n") + u64(1));
  CHECK(c.closed_by_peer());
  CHECK(d.logs("requires a token"));
}
