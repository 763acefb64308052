// The embedded StoreServer (as ddprun --standalone and workers host it), driven
// in-process for what the daemon's flags do not expose.
#include "ddp/store/store_server.hpp"

#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"
#include "raw_client.hpp"
#include "test_support.hpp"

using namespace ddp::store;
using namespace ddp::test;
using namespace std::chrono_literals;

namespace {
StoreServerOptions local() {
  StoreServerOptions o;
  o.host = "127.0.0.1";
  return o;
}
}  // namespace

TEST_CASE("a client that never reads its responses is dropped, others are served") {
  auto o = local();
  o.max_queued_bytes_per_connection = 1 << 20;
  StoreServer server(o);
  server.start();
  RawClient good(server.port());
  REQUIRE(good.handshake() == Status::kOk);
  REQUIRE(good.call(make_request(Op::kSet, {"big"}, {std::string(256 * 1024, 'x')})).status == Status::kOk);

  RawClient hog(server.port());
  REQUIRE(hog.handshake() == Status::kOk);
  std::string burst;
  for (std::uint32_t i = 1; i <= 200; ++i)
    encode_request(make_request(Op::kTryGet, {"big"}, {}, 0, 0, i), burst);
  // 200 x 256 KiB of answers: far past the socket buffers and the 1 MiB cap.
  hog.send_bytes(burst);
  CHECK(wait_until([&] { return server.stats().at("connections") == 1; }));
  CHECK(good.call(make_request(Op::kPing)).status == Status::kOk);
  server.stop();
}

TEST_CASE("start fails with NetworkError naming the address when the port is taken") {
  StoreServer first(local());
  first.start();
  auto o = local();
  o.port = first.port();
  StoreServer second(o);
  CHECK_THROWS_WITH(second.start(), Catch::Contains("127.0.0.1:" + std::to_string(first.port())));
}

TEST_CASE("stop answers pending requests and is idempotent, stats reflect the state") {
  StoreServer server(local());
  server.start();
  RawClient c(server.port());
  REQUIRE(c.handshake() == Status::kOk);
  c.call(make_request(Op::kSet, {"a"}, {"1"}));
  c.send(make_request(Op::kGet, {"never"}, {}, 0, -1, 5));
  c.call(make_request(Op::kPing));
  auto stats = server.stats();
  CHECK(stats.at("keys") == 1);
  CHECK(stats.at("waiters") == 1);
  CHECK(stats.at("revision") == 1);
  server.stop();
  auto resp = c.recv();
  REQUIRE(resp);
  CHECK(resp->id == 5);
  CHECK(resp->status == Status::kShuttingDown);
  CHECK(c.closed_by_peer());
  server.stop();
}
