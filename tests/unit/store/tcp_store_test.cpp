// TcpStore-only behaviour: authentication, pipelining, reconnects, watch resumption.
#include <atomic>
#include <catch2/catch.hpp>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "ddp/common/error.hpp"
#include "store_backends.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using namespace ddp::store;
using namespace ddp::test;

namespace {

std::unique_ptr<StoreServer> start_server(ddp::store::StoreServerOptions opts) {
  auto server = std::make_unique<StoreServer>(std::move(opts));
  server->start();
  return server;
}

}  // namespace

TEST_CASE("a wrong token fails with an error that says to check --token-file", "[tcp]") {
  auto opts = loopback_server_options();
  opts.token = "secret";
  auto server = start_server(opts);
  auto client = client_options(server->port());
  client.token = "wrong";
  CHECK_THROWS_AS(TcpStore(client), ddp::store::AuthError);
  CHECK_THROWS_WITH(TcpStore(client), Contains("authentication failed") && Contains("--token-file"));
  client.token = "secret";
  TcpStore ok(client);
  ok.set("k", "v");
  CHECK(ok.try_get("k") == std::optional<std::string>("v"));
}

TEST_CASE("after a few wrong tokens the answer to a wrong one is held, the right one still gets in at once",
          "[tcp]") {
  auto opts = loopback_server_options();
  opts.token = "secret";
  opts.auth_backoff_base = 2s;
  opts.auth_backoff_max = 2s;
  auto server = start_server(opts);
  auto client = client_options(server->port());
  client.token = "wrong";
  for (int i = 0; i < opts.auth_free_failures; ++i) {
    CHECK_THROWS_WITH(TcpStore(client), Contains("wrong token"));
  }
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(TcpStore(client),
                    Contains("wrong token") &&
                        Contains("too many failed authentication attempts from 127.0.0.1") &&
                        Contains("held 2000 ms"));
  CHECK(std::chrono::steady_clock::now() - t0 >= 2s);
  client.token = "secret";  // the address is backing off; the right token is not
  const auto t1 = std::chrono::steady_clock::now();
  TcpStore ok(client);
  CHECK(std::chrono::steady_clock::now() - t1 < 2s);
  ok.set("k", "v");
  CHECK(ok.try_get("k") == std::optional<std::string>("v"));
}

TEST_CASE("a watch from before the retained history fails with CompactedError", "[tcp]") {
  auto opts = loopback_server_options();
  opts.history_max_bytes = 1024;
  auto server = start_server(opts);
  TcpStore store(client_options(server->port()));
  for (int i = 0; i < 20; ++i) store.set("c/k", std::string(100, 'x'));
  CHECK_THROWS_AS(store.watch("c/", 1, [](const ddp::store::WatchEvent&) {}), ddp::store::CompactedError);
  CHECK_THROWS_WITH(store.watch("c/", 1, [](const ddp::store::WatchEvent&) {}),
                    Contains("compacted") && Contains("list() again"));
  std::atomic<int> seen{0};
  auto w = store.watch("c/", 20, [&](const ddp::store::WatchEvent&) { ++seen; });
  CHECK(ddp::test::wait_until([&] { return seen.load() == 1; }, 10s));
}

TEST_CASE("an unconfirmed watch_all returns at once, delivers events, and reports a refusal to on_error",
          "[tcp]") {
  auto opts = loopback_server_options();
  opts.history_max_bytes = 1024;
  auto server = start_server(opts);
  TcpStore store(client_options(server->port()));
  for (int i = 0; i < 20; ++i) store.set("c/k", std::string(100, 'x'));
  std::mutex mu;
  std::vector<std::string> seen, errors;
  const auto spec = [&](Revision from) {
    WatchSpec w{"c/", from,
                [&](const WatchEvent& ev) {
                  std::lock_guard<std::mutex> lk(mu);
                  seen.push_back(ev.value);
                },
                [&](const std::string& why) {
                  std::lock_guard<std::mutex> lk(mu);
                  errors.push_back(why);
                }};
    w.confirmed = false;
    return w;
  };
  std::vector<WatchSpec> specs;
  specs.push_back(spec(20));                         // the last set's revision: replayed
  specs.push_back(spec(1));                          // compacted long ago
  auto handles = store.watch_all(std::move(specs));  // no throw: nothing was confirmed
  REQUIRE(handles.size() == 2);
  store.set("c/k", "after");
  const auto count = [&](const std::vector<std::string>& v) {
    std::lock_guard<std::mutex> lk(mu);
    return v.size();
  };
  CHECK(wait_until([&] { return count(seen) == 2 && count(errors) == 1; }, 10s));
  std::lock_guard<std::mutex> lk(mu);
  CHECK(seen.back() == "after");
  REQUIRE(errors.size() == 1);
  CHECK_THAT(errors[0], Contains("revision 1 is compacted") && Contains("list() again"));
}

namespace {
// A loopback port that a server had a moment ago, now closed (refused until
// something listens there again).
std::uint16_t closed_port() {
  auto server = start_server(loopback_server_options());
  return server->port();
}
}  // namespace

TEST_CASE("connecting to a closed port fails after connect_timeout naming the endpoint", "[tcp]") {
  const std::uint16_t port = closed_port();
  auto client = client_options(port);
  client.connect_timeout = 300ms;
  CHECK_THROWS_WITH(TcpStore(client), Contains("127.0.0.1:" + std::to_string(port)) &&
                                          Contains("within 300 ms") && Contains("refused"));
}

TEST_CASE("a client reaches its store by host name as by address, and a name that does not resolve is named",
          "[tcp]") {
  auto server = start_server(loopback_server_options());
  auto by_name = client_options(server->port());
  by_name.endpoint.host = "localhost";
  TcpStore named(by_name);
  named.set("k", "by name");
  CHECK(TcpStore(client_options(server->port())).try_get("k") == std::optional<std::string>("by name"));

  auto unknown = client_options(server->port());
  unknown.endpoint.host = "no-such-host.invalid";
  unknown.connect_timeout = 300ms;
  CHECK_THROWS_WITH(TcpStore(unknown), Contains("no-such-host.invalid"));
}

TEST_CASE("a client started before its server keeps retrying and connects once the server is up", "[tcp]") {
  const std::uint16_t port = closed_port();
  auto client = client_options(port);
  client.connect_timeout = 60s;
  auto connected = std::async(std::launch::async, [&] {
    TcpStore store(client);
    return store.get("k", 10s);
  });
  auto opts = loopback_server_options();
  opts.port = port;
  auto server = start_server(opts);
  TcpStore(client_options(port)).set("k", "v");
  CHECK(connected.get() == "v");
}

TEST_CASE("first_connect_timeout bounds only the first connect: reconnects give up within connect_timeout",
          "[tcp]") {
  const std::uint16_t port = closed_port();
  auto client = client_options(port);
  client.connect_timeout = 300ms;
  client.first_connect_timeout = 60s;
  std::atomic<int> retries{0};
  client.on_connect_retry = [&](const std::string&) { ++retries; };
  // Up long after connect_timeout: the first connect still waits for it.
  auto connected = std::async(std::launch::async, [&] { return std::make_unique<TcpStore>(client); });
  REQUIRE(wait_until([&] { return retries.load() > 0; }));
  std::this_thread::sleep_for(600ms);
  REQUIRE(connected.wait_for(0ms) == std::future_status::timeout);
  auto opts = loopback_server_options();
  opts.port = port;
  auto server = start_server(opts);
  auto store = connected.get();
  store->set("k", "v");
  // Gone for good: a reconnect gives up after connect_timeout, not the first bound.
  server.reset();
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(
      [&] {
        for (int i = 0; i < 3; ++i) {  // the first call may only find the connection lost
          try {
            store->set("k", "w");
          } catch (const ddp::NetworkError& e) {
            if (std::string(e.what()).find("within 300 ms") != std::string::npos) throw;
          }
        }
      }(),
      ddp::NetworkError);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
}

TEST_CASE("a blocking get in one thread does not block another thread's set", "[tcp]") {
  auto server = start_server(loopback_server_options());
  TcpStore store(client_options(server->port()));
  auto blocked = std::async(std::launch::async, [&] { return store.get("release", 20s); });
  CHECK(blocked.wait_for(50ms) == std::future_status::timeout);
  // Many round trips on the same connection while the get is parked on the
  // server, each answered within the client's request timeout.
  for (int i = 0; i < 100; ++i) store.set("busy", std::to_string(i));
  CHECK(store.try_get("busy") == std::optional<std::string>("99"));
  CHECK(blocked.wait_for(0ms) == std::future_status::timeout);
  store.set("release", "now");
  REQUIRE(blocked.wait_for(5s) == std::future_status::ready);
  CHECK(blocked.get() == "now");
}

TEST_CASE("the client reconnects after a server restart and its watch loses no event", "[tcp]") {
  ddp::test::TempDir dir;
  auto opts = loopback_server_options();
  ddp::test::fs::create_directories(dir / "data");
  opts.data_dir = (dir / "data").string();
  auto server = start_server(opts);
  const auto port = server->port();
  TcpStore store(client_options(port));

  std::mutex mu;
  std::vector<std::string> seen;
  std::atomic<int> errors{0};
  auto handle = store.watch(
      "job/", 0,
      [&](const ddp::store::WatchEvent& ev) {
        std::lock_guard<std::mutex> lk(mu);
        seen.push_back(ev.key);
      },
      [&](const std::string&) { ++errors; });
  store.set("job/before", "1");
  auto count = [&] {
    std::lock_guard<std::mutex> lk(mu);
    return seen.size();
  };
  REQUIRE(ddp::test::wait_until([&] { return count() == 1; }));

  server.reset();  // graceful stop; keys persist in data_dir
  opts.port = port;
  server = start_server(opts);

  // The first call may be the one in flight when the old connection died.
  try {
    store.set("job/after", "2");
  } catch (const ddp::NetworkError&) {
    store.set("job/after", "2");
  }
  CHECK(store.try_get("job/before") == std::optional<std::string>("1"));
  // A marker written last: once the watch has it, every earlier event is in,
  // so a write applied twice (a retried call answered with its first attempt's
  // failure) shows as a duplicate.
  store.set("job/marker", "3");
  REQUIRE(ddp::test::wait_until([&] { return count() >= 3; }));
  std::lock_guard<std::mutex> lk(mu);
  CHECK(seen == std::vector<std::string>{"job/before", "job/after", "job/marker"});
  CHECK(errors == 0);
}

TEST_CASE("a watch reports an error once when the server stays away", "[tcp]") {
  auto server = start_server(loopback_server_options());
  auto opts = client_options(server->port());
  opts.connect_timeout = 300ms;
  TcpStore store(opts);
  std::atomic<int> errors{0};
  std::mutex mu;
  std::string reason;
  auto handle = store.watch(
      "x/", 0, [](const ddp::store::WatchEvent&) {},
      [&](const std::string& why) {
        std::lock_guard<std::mutex> lk(mu);
        reason = why;
        ++errors;
      });
  server.reset();
  REQUIRE(ddp::test::wait_until([&] { return errors.load() > 0; }));
  // A second error would come from another failed reconnect cycle; give it the chance.
  CHECK_FALSE(ddp::test::wait_until([&] { return errors.load() > 1; }, 1s));
  std::lock_guard<std::mutex> lk(mu);
  CHECK_THAT(reason, Contains("x/") && Contains("127.0.0.1"));
}

TEST_CASE("a get pending when the server stops fails with a shutting-down network error", "[tcp]") {
  auto server = start_server(loopback_server_options());
  TcpStore store(client_options(server->port()));
  auto blocked = std::async(std::launch::async, [&] { return store.get("never", 30s); });
  REQUIRE(blocked.wait_for(100ms) == std::future_status::timeout);
  server->stop();
  // Past the client's 5 s of reconnects, should the get have gone out after the stop.
  REQUIRE(blocked.wait_for(15s) == std::future_status::ready);
  CHECK_THROWS_AS(blocked.get(), ddp::NetworkError);
}

TEST_CASE("a revoked lease is named in the error", "[tcp]") {
  auto server = start_server(loopback_server_options());
  TcpStore store(client_options(server->port()));
  const auto lease = store.lease_grant(10s);
  store.lease_revoke(lease);
  CHECK_THROWS_WITH(store.lease_keepalive(lease), Contains(std::to_string(lease)));
}

TEST_CASE("a batch's quiet set before a waiting get is applied, and its failure still comes back", "[tcp]") {
  auto server = start_server(loopback_server_options());
  TcpStore store(client_options(server->port()));
  std::vector<BatchOp> ops;
  ops.push_back(BatchOp::set("record", "r"));
  ops.back().quiet = true;
  ops.push_back(BatchOp::get("closed", 200ms));
  store.batch(ops);
  CHECK(!ops[0].error);
  CHECK(ops[1].error);  // nobody closed: the get timed out, and said the set went in
  CHECK(store.get("record", 1s) == "r");
  // A failing one (a lease that is gone) fails in its op, the get still runs.
  const auto lease = store.lease_grant(10s);
  store.lease_revoke(lease);
  store.set("closed", "yes");
  ops.clear();
  ops.push_back(BatchOp::set("record2", "r", lease));
  ops.back().quiet = true;
  ops.push_back(BatchOp::get("closed", 1s));
  store.batch(ops);
  REQUIRE(ops[0].error);
  CHECK_THROWS_WITH(std::rethrow_exception(ops[0].error), Contains(std::to_string(lease)));
  CHECK(ops[1].result == "yes");
  CHECK(!store.try_get("record2"));
}

TEST_CASE("stat reports the server's counters", "[tcp]") {
  auto server = start_server(loopback_server_options());
  TcpStore store(client_options(server->port()));
  store.set("a", "b");
  const auto st = store.stat();
  CHECK(st.count("keys") == 1);
  CHECK(st.count("revision") == 1);
  CHECK_NOTHROW(store.ping());
}

TEST_CASE("a request from a watch callback of the same store fails instead of hanging", "[tcp]") {
  auto server = start_server(loopback_server_options());
  TcpStore store(client_options(server->port()));
  std::mutex mu;
  std::string error;
  auto handle = store.watch("cb/", 0, [&](const ddp::store::WatchEvent&) {
    try {
      store.try_get("cb/x");
    } catch (const ddp::StoreError& e) {
      std::lock_guard<std::mutex> lk(mu);
      error = e.what();
    }
  });
  store.set("cb/x", "1");
  REQUIRE(ddp::test::wait_until([&] {
    std::lock_guard<std::mutex> lk(mu);
    return !error.empty();
  }));
  std::lock_guard<std::mutex> lk(mu);
  CHECK_THAT(error, Contains("watch callback") && Contains("deadlock"));
}

TEST_CASE("a lease bound to its connection ends when the client goes away, an unbound one lives its ttl",
          "[tcp]") {
  auto server = start_server(loopback_server_options());
  TcpStore observer(client_options(server->port()));
  std::mutex mu;
  std::vector<std::string> deleted;
  auto watch = observer.watch("node/", 0, [&](const ddp::store::WatchEvent& e) {
    if (e.type == ddp::store::EventType::kDelete) {
      std::lock_guard<std::mutex> lock(mu);
      deleted.push_back(e.key);
    }
  });
  {
    auto bound_opts = client_options(server->port());
    bound_opts.bind_leases_to_connection = true;
    TcpStore bound(bound_opts);
    bound.set("node/bound", "x", bound.lease_grant(60s));
    TcpStore unbound(client_options(server->port()));
    unbound.set("node/unbound", "y", unbound.lease_grant(60s));
  }  // both clients close their connections
  CHECK(ddp::test::wait_until(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return !deleted.empty();
      },
      5s));
  CHECK_FALSE(observer.try_get("node/bound"));
  CHECK(observer.try_get("node/unbound") == std::optional<std::string>("y"));
  std::lock_guard<std::mutex> lock(mu);
  CHECK(deleted == std::vector<std::string>{"node/bound"});
}

TEST_CASE("a cancelled watch leaves the server soon even when its client sends nothing more", "[tcp]") {
  // The cancel waits for the client's next request to share its write, but
  // not for long: another client sees the server's watch count drop.
  auto server = start_server(loopback_server_options());
  TcpStore store(client_options(server->port()));
  TcpStore other(client_options(server->port()));
  auto watches = [&] { return other.stat().at("watches"); };
  auto handle = store.watch("c/", 0, [](const ddp::store::WatchEvent&) {});
  REQUIRE(watches() == "1");
  handle.reset();
  CHECK(ddp::test::wait_until([&] { return watches() == "0"; }, 2s));
}

TEST_CASE("a watch_all that the server refuses in part leaves no watch running", "[tcp]") {
  auto opts = loopback_server_options();
  opts.history_max_bytes = 1024;
  auto server = start_server(opts);
  TcpStore store(client_options(server->port()));
  TcpStore other(client_options(server->port()));
  for (int i = 0; i < 20; ++i) store.set("k", std::string(100, 'x'));
  std::vector<ddp::store::WatchSpec> specs;
  specs.push_back(ddp::store::WatchSpec{"a/", 0, [](const ddp::store::WatchEvent&) {}, {}});
  specs.push_back(ddp::store::WatchSpec{"k", 1, [](const ddp::store::WatchEvent&) {}, {}});  // compacted
  CHECK_THROWS_AS(store.watch_all(std::move(specs)), ddp::store::CompactedError);
  CHECK(ddp::test::wait_until([&] { return other.stat().at("watches") == "0"; }, 2s));
}
