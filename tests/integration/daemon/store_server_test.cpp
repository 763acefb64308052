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

TEST_CASE("a quiet set is answered only when it fails, and before the requests written after it") {
  StoreServer server(local());
  server.start();
  RawClient c(server.port());
  REQUIRE(c.handshake() == Status::kOk);
  // Succeeds: no answer of its own; the try_get written after it sees its value.
  c.send(make_request(Op::kSet, {"k"}, {"v"}, 0, kSetQuiet, 1));
  c.send(make_request(Op::kTryGet, {"k"}, {}, 0, 0, 2));
  auto r = c.recv();
  REQUIRE(r);
  CHECK(r->id == 2);
  REQUIRE(r->items.size() == 1);
  CHECK(r->items[0].value == "v");
  // Fails (no such lease): answered, ahead of the ping written after it.
  c.send(make_request(Op::kSet, {"k2"}, {"v"}, 424242, kSetQuiet, 3));
  c.send(make_request(Op::kPing, {}, {}, 0, 0, 4));
  r = c.recv();
  REQUIRE(r);
  CHECK(r->id == 3);
  CHECK(r->status == Status::kLeaseNotFound);
  r = c.recv();
  REQUIRE(r);
  CHECK(r->id == 4);
  // Without the flag a set is answered as ever.
  c.send(make_request(Op::kSet, {"k3"}, {"v"}, 0, 0, 5));
  r = c.recv();
  REQUIRE(r);
  CHECK(r->id == 5);
  CHECK(r->status == Status::kOk);
  CHECK(!c.recv(100ms));
  server.stop();
}

TEST_CASE("a quiet watch gets no ack, then its events, and a refusal is still answered") {
  auto o = local();
  o.history_max_bytes = 1024;
  StoreServer server(o);
  server.start();
  RawClient c(server.port());
  REQUIRE(c.handshake() == Status::kOk);
  for (int i = 0; i < 20; ++i)
    REQUIRE(c.call(make_request(Op::kSet, {"w/k"}, {std::string(100, 'x')})).status == Status::kOk);
  // From the next revision: nothing to replay, and no ack.
  c.send(make_request(Op::kWatch, {"w/"}, {}, kWatchQuiet, 21, 7));
  CHECK(!c.recv(200ms));
  c.send(make_request(Op::kSet, {"w/k"}, {"new"}, 0, 0, 8));
  auto r = c.recv();
  REQUIRE(r);
  CHECK(r->id == 8);  // the set's answer, then the event
  r = c.recv();
  REQUIRE(r);
  CHECK(r->id == 7);
  CHECK(r->status == Status::kEvent);
  // From a revision the history no longer holds: refused as ever.
  c.send(make_request(Op::kWatch, {"w/"}, {}, kWatchQuiet, 1, 9));
  r = c.recv();
  REQUIRE(r);
  CHECK(r->id == 9);
  CHECK(r->status == Status::kCompacted);
  server.stop();
}

TEST_CASE("a quiet cancel ends its watch or wait with no answer to either") {
  StoreServer server(local());
  server.start();
  RawClient c(server.port());
  REQUIRE(c.handshake() == Status::kOk);
  c.send(make_request(Op::kWatch, {"q/"}, {}, kWatchQuiet, 1, 1));
  c.send(make_request(Op::kGet, {"never"}, {}, 0, -1, 2));
  c.send(make_request(Op::kCancel, {}, {}, 1, kCancelQuiet, 3));
  c.send(make_request(Op::kCancel, {}, {}, 2, kCancelQuiet, 4));
  c.send(make_request(Op::kCancel, {}, {}, 99, kCancelQuiet, 5));  // nothing pending: still silent
  c.send(make_request(Op::kSet, {"q/k"}, {"v"}, 0, 0, 6));
  c.send(make_request(Op::kSet, {"never"}, {"v"}, 0, 0, 7));
  // Only the sets are answered: the watch saw no event, the get no value.
  for (const std::uint32_t id : {6u, 7u}) {
    const auto r = c.recv();
    REQUIRE(r);
    CHECK(r->id == id);
  }
  CHECK(!c.recv(200ms));
  CHECK(server.stats().at("watches") == 0);
  CHECK(server.stats().at("waiters") == 0);
  server.stop();
}
