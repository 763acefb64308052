// RoundMonitor's lease after this process was stopped past the lease's TTL:
// the keep-alive thread has not heard back yet, and the next join must not
// put its record under a lease the store already dropped. And a round watch
// the store refuses, now that the round's watches go out unconfirmed.
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "counting_store.hpp"
#include "ddp/common/error.hpp"
#include "ddp/store/memory_store.hpp"
#include "ddp/store/store_server.hpp"
#include "ddp/store/tcp_store.hpp"
#include "round_monitor.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;

TEST_CASE("a lease that expired while its keep-alives went unheard is replaced at the next join") {
  auto inner = std::make_shared<ddp::store::MemoryStore>();
  auto store = std::make_shared<ddp::test::CountingStore>(inner);
  ddp::rdzv::detail::RoundMonitor monitor(store, 50ms, 200ms);
  const auto first = monitor.lease();
  CHECK_NOTHROW(inner->set("before", "1", first));
  // As a stopped process: no keep-alive reaches the store, none is answered.
  store->fail_keepalives = true;
  std::this_thread::sleep_for(600ms);
  CHECK_THROWS_AS(inner->set("gone", "1", first), ddp::StoreError);  // the store dropped it
  store->fail_keepalives = false;
  const auto second = monitor.lease();
  CHECK(second != first);
  CHECK_NOTHROW(inner->set("after", "1", second));
}

TEST_CASE("a round watch the store refuses (compacted) ends the round as a lost store, with the reason") {
  // The round's watches go out unconfirmed: a refusal cannot be thrown from
  // begin(), it comes back as the round's kStoreLost event instead.
  ddp::store::StoreServerOptions opts;
  opts.host = "127.0.0.1";
  opts.history_max_bytes = 1024;
  ddp::store::StoreServer server(opts);
  server.start();
  ddp::store::TcpStoreOptions copts;
  copts.endpoint = ddp::Endpoint{"127.0.0.1", server.port()};
  auto store = std::make_shared<ddp::store::TcpStore>(copts);
  for (int i = 0; i < 20; ++i) store->set("/j/rdzv/round_0/node/0", std::string(100, 'x'));
  ddp::rdzv::detail::RoundMonitor monitor(store, 1s, 5s, "the test store");
  std::mutex mu;
  std::vector<std::pair<ddp::rdzv::RoundEvent, std::string>> events;
  monitor.set_callback([&](std::int64_t, ddp::rdzv::RoundEvent e, const std::string& detail) {
    std::lock_guard<std::mutex> lock(mu);
    events.emplace_back(e, detail);
  });
  ddp::rdzv::detail::WatchedRound r;
  r.prefix = "/j/rdzv/round_0/";
  r.node_from = 1;  // long compacted
  r.ctl.revision = 0;
  CHECK_NOTHROW(monitor.begin(r));
  const bool ended = ddp::test::wait_until(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return !events.empty();
      },
      10s);
  REQUIRE(ended);
  std::lock_guard<std::mutex> lock(mu);
  CHECK(events[0].first == ddp::rdzv::RoundEvent::kStoreLost);
  CHECK_THAT(events[0].second, Catch::Contains("watch of /j/rdzv/round_0/ on the test store ended") &&
                                   Catch::Contains("revision 1 is compacted"));
}
