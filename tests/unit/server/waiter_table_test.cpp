#include "waiter_table.hpp"

#include <catch2/catch.hpp>

#include "fake_clock.hpp"

using namespace ddp::store::server;
using ddp::Clock;
using ddp::Millis;
using ddp::test::t0;

namespace {
const auto never = Clock::time_point::max();
}  // namespace

TEST_CASE("a waiter is released only when its last missing key is put") {
  WaiterTable t;
  t.add(1, {"a", "b"}, never);
  t.add(2, {"a"}, never);
  CHECK(t.on_put("a") == std::vector<WaiterId>{2});
  CHECK(t.size() == 1);
  CHECK(t.on_put("a").empty());
  CHECK(t.on_put("b") == std::vector<WaiterId>{1});
  CHECK(t.size() == 0);
}

TEST_CASE("waiters on one key are released together in registration order") {
  WaiterTable t;
  for (WaiterId id = 10; id > 0; --id) t.add(id, {"k"}, never);
  auto ready = t.on_put("k");
  REQUIRE(ready.size() == 10);
  CHECK(ready.front() == 1);
  CHECK(ready.back() == 10);
}

TEST_CASE("waiters expire at their deadline, earliest first, and never-waiters stay") {
  WaiterTable t;
  t.add(1, {"x"}, t0 + Millis(300));
  t.add(2, {"x"}, t0 + Millis(100));
  t.add(3, {"x"}, never);
  CHECK(t.next_deadline() == t0 + Millis(100));
  CHECK(t.take_expired(t0 + Millis(50)).empty());
  CHECK(t.take_expired(t0 + Millis(300)) == std::vector<WaiterId>{2, 1});
  CHECK_FALSE(t.next_deadline().has_value());
  CHECK(t.on_put("x") == std::vector<WaiterId>{3});
}

TEST_CASE("a removed waiter is neither released nor expired") {
  WaiterTable t;
  t.add(1, {"x", "y"}, t0 + Millis(10));
  CHECK(t.remove(1));
  CHECK_FALSE(t.remove(1));
  CHECK(t.on_put("x").empty());
  CHECK(t.take_expired(t0 + Millis(20)).empty());
  CHECK(t.size() == 0);
}

TEST_CASE("a queue push releases one waiter, the oldest, and leaves the rest waiting") {
  WaiterTable t;
  t.add(3, {"q"}, never);
  t.add(1, {"q"}, never);
  t.add(2, {"q"}, never);
  CHECK(t.on_push("q") == WaiterId{1});
  CHECK(t.size() == 2);
  CHECK(t.on_push("q") == WaiterId{2});
  CHECK(t.on_push("q") == WaiterId{3});
  CHECK_FALSE(t.on_push("q"));
  CHECK(t.size() == 0);
}

TEST_CASE("a queue push passes over a waiter that still needs another key, as torch's server does") {
  WaiterTable t;
  t.add(1, {"q", "other"}, never);
  t.add(2, {"q"}, never);
  CHECK(t.on_push("q") == WaiterId{2});
  CHECK(t.size() == 1);
  CHECK(t.on_put("other") == std::vector<WaiterId>{1});  // "q" counted as arrived for it
}
