// Descriptors at a low RLIMIT_NOFILE: the metrics port and the store port each
// have a bound of their own, so neither can take the other's descriptors, and
// a client past the store's bound is refused at once instead of waiting in the
// listen backlog for a descriptor to free up.
#include "daemon_fixture.hpp"

using namespace ddp::test;
using namespace ddp::store;
using namespace std::chrono_literals;

namespace {

// RLIMIT_NOFILE of the daemon in these tests (prlimit, soft and hard).
constexpr int kNofile = 128;

struct MetricsDaemon {
  MetricsDaemon()
      : d(dir.path(), {"--metrics-port", "0", "--metrics-port-file", (dir / "mport").string()}, "", kNofile),
        mport(wait_for_port_file(dir / "mport")) {
    REQUIRE(mport > 0);
  }
  TempDir dir;
  Daemon d;
  int mport;
};

}  // namespace

TEST_CASE("idle metrics connections take no descriptor from store clients or /healthz") {
  MetricsDaemon m;
  // More idle HTTP connections than the daemon has descriptors.
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 2 * kNofile; ++i) idle.push_back(std::make_unique<RawClient>(m.mport));
  RawClient c(m.d.port);
  CHECK(try_handshake(c, "", 2s) == Status::kOk);
  CHECK(http_get(m.mport, "/healthz", 2s).status == 200);
  // The oldest idle ones were closed to let the newer ones in.
  CHECK(idle.front()->closed_by_peer(2s));
  check_served(c, "beside-idle-http");
}

TEST_CASE("store clients past the descriptor limit are refused at once, and /healthz still answers") {
  MetricsDaemon m;
  std::vector<std::unique_ptr<RawClient>> clients;
  int served = 0, refused = 0, hanging = 0;
  for (int i = 0; i < kNofile + 20; ++i) {
    auto c = std::make_unique<RawClient>(m.d.port);
    if (try_handshake(*c, "", 2s) == Status::kOk)
      ++served;
    else if (c->closed_by_peer(100ms))
      ++refused;
    else
      ++hanging;
    clients.push_back(std::move(c));
  }
  INFO("served " << served << ", refused " << refused << ", left hanging " << hanging);
  CHECK(hanging == 0);
  CHECK(refused > 0);
  CHECK(served > kNofile / 4);
  CHECK(http_get(m.mport, "/healthz", 2s).status == 200);
  CHECK_THAT(m.d.proc->err(), Catch::Contains("max_connections lowered"));
  CHECK_THAT(m.d.proc->err(), Catch::Contains("max_connections=" + std::to_string(served) + " reached"));
}
