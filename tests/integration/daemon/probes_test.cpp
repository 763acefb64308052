// The metrics port's probes: /healthz says whether the daemon lives (its loop
// answers), /readyz whether it can also persist writes. A data dir that
// refuses writes (here: a failed write whose cut-back keeps failing) makes
// /readyz 503 while /healthz stays 200 and reads are served.
#include "daemon_fixture.hpp"

using namespace ddp::test;
using namespace ddp::store;
using namespace std::chrono_literals;

TEST_CASE("/readyz answers 503 while the data dir cannot persist, /healthz stays 200, reads are served") {
  TempDir dir;
  // The 2nd log write is cut short, and cutting it back fails 3 times: the
  // daemon stays degraded for about 3 disk probes (one a second), then recovers.
  Daemon d(dir.path(),
           {"--data-dir", (dir / "data").string(), "--metrics-port", "0", "--metrics-port-file",
            (dir / "mport").string()},
           "log.write=short@1*1;log.truncate=eio@0*3");
  const int mport = wait_for_port_file(dir / "mport");
  REQUIRE(mport > 0);
  auto c = d.client();
  CHECK(http_get(mport, "/readyz").status == 200);
  REQUIRE(c->call(make_request(Op::kSet, {"k1"}, {"v1"})).status == Status::kOk);
  REQUIRE(c->call(make_request(Op::kSet, {"k2"}, {"v2"})).status == Status::kInternal);

  const auto ready = http_get(mport, "/readyz");
  CHECK(ready.status == 503);
  CHECK_THAT(ready.body, Catch::Contains("cannot persist"));
  const auto health = http_get(mport, "/healthz");
  CHECK(health.status == 200);
  CHECK_THAT(health.body, Catch::Contains("degraded"));
  auto get = c->call(make_request(Op::kTryGet, {"k1"}));
  CHECK(get.status == Status::kOk);

  // Once the data dir takes writes again, so does the daemon, and it is ready.
  REQUIRE(wait_until([&] { return http_get(mport, "/readyz").status == 200; }, 20s));
  CHECK(c->call(make_request(Op::kSet, {"k3"}, {"v3"})).status == Status::kOk);
}
