// RoundMonitor's lease after this process was stopped past the lease's TTL:
// the keep-alive thread has not heard back yet, and the next join must not
// put its record under a lease the store already dropped.
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <thread>

#include "counting_store.hpp"
#include "ddp/common/error.hpp"
#include "ddp/store/memory_store.hpp"
#include "round_monitor.hpp"

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
