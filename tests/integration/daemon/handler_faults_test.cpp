// An exception escaping a handler of one of the daemon's loops (a bug, injected
// here with the "throw" failpoint of ddp-rendezvousd-failpoints) costs at most
// the connection it was handling: the loop keeps accepting and serving.
#include <signal.h>

#include "daemon_fixture.hpp"

using namespace ddp::test;
using namespace ddp::store;
using namespace std::chrono_literals;

TEST_CASE("an exception in the store's accept handler does not stop the daemon accepting") {
  TempDir dir;
  Daemon d(dir.path(), {}, "server.accept=throw*1");
  RawClient first(d.port);  // its accept throws
  CHECK(first.closed_by_peer(5s));
  RawClient second(d.port);
  REQUIRE(try_handshake(second, "") == Status::kOk);
  check_served(second, "after-accept-fault");
  CHECK_THAT(d.proc->err(), Catch::Contains("failpoint server.accept"));
}

TEST_CASE("an exception in a connection's read handler closes that connection only") {
  TempDir dir;
  Daemon d(dir.path(), {}, "server.read=throw*1");
  RawClient good(d.port);  // accepted, but nothing read from it yet
  RawClient bad(d.port);
  bad.send_preamble();  // the first read of any connection throws
  CHECK(bad.closed_by_peer(5s));
  REQUIRE(try_handshake(good, "") == Status::kOk);
  check_served(good, "after-read-fault");
  auto later = d.client();
  check_served(*later, "later");
}

TEST_CASE("an exception in the metrics accept handler leaves /healthz answering") {
  TempDir dir;
  Daemon d(dir.path(), {"--metrics-port", "0", "--metrics-port-file", (dir / "mport").string()},
           "metrics.accept=throw*1");
  const int mport = wait_for_port_file(dir / "mport");
  REQUIRE(mport > 0);
  CHECK(http_get(mport, "/healthz", 5s).status != 200);  // the one whose accept throws
  CHECK(http_get(mport, "/healthz", 5s).status == 200);
  CHECK(d.proc->running());
  auto c = d.client();
  check_served(*c, "after-metrics-fault");
}
