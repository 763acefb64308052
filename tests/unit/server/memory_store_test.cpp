#include "ddp/store/memory_store.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <mutex>
#include <thread>

#include "ddp/common/error.hpp"
#include "test_support.hpp"

using namespace ddp::store;
using namespace std::chrono_literals;

TEST_CASE("memory store: get blocks until another thread sets the key") {
  MemoryStore s;
  std::thread setter([&] { s.set("late", "here"); });
  CHECK(s.get("late", 5s) == "here");
  setter.join();
}

TEST_CASE("memory store: get and wait time out with TimeoutError") {
  MemoryStore s;
  CHECK_THROWS_AS(s.get("never", 30ms), ddp::TimeoutError);
  s.set("a", "1");
  CHECK_THROWS_AS(s.wait({"a", "b"}, 30ms), ddp::TimeoutError);
  s.set("b", "2");
  CHECK_NOTHROW(s.wait({"a", "b"}, 0ms));
}

TEST_CASE("memory store: kv operations") {
  MemoryStore s;
  CHECK(s.set("k", "v") == 1);
  CHECK(s.try_get("k") == std::optional<std::string>("v"));
  CHECK_FALSE(s.try_get("x").has_value());
  CHECK(s.add("n", 3) == 3);
  CHECK(s.add("n", -1) == 2);
  CHECK_THROWS_AS(s.add("k", 1), ddp::StoreError);
  CHECK(s.compare_set("c", "", "1") == "1");
  CHECK(s.compare_set("c", "0", "2") == "1");
  CHECK(s.compare_set("c", "1", "2") == "2");
  CHECK(s.append("l", "ab") == 2);
  CHECK(s.append("l", "c") == 3);
  CHECK(s.check({"k", "n"}));
  CHECK_FALSE(s.check({"k", "zz"}));
  auto mg = s.multi_get({"k", "zz"});
  REQUIRE(mg.size() == 2);
  CHECK(mg[0] == std::optional<std::string>("v"));
  CHECK_FALSE(mg[1].has_value());
  s.multi_set({{"p/1", "a"}, {"p/2", "b"}});
  auto l = s.list("p/");
  REQUIRE(l.kvs.size() == 2);
  CHECK(l.kvs[1].value == "b");
  CHECK(l.revision == l.kvs[1].revision);
  CHECK(s.num_keys() == 6);
  CHECK(s.remove("k"));
  CHECK_FALSE(s.remove("k"));
}

TEST_CASE("memory store: an expired lease removes its keys and watchers see the delete") {
  MemoryStore s;
  std::mutex mu;
  std::vector<WatchEvent> seen;
  auto w = s.watch("node/", 0, [&](const WatchEvent& e) {
    std::lock_guard<std::mutex> lk(mu);
    seen.push_back(e);
  });
  // Long enough that the set lands first on a loaded machine; the waits below cover it.
  const auto lease = s.lease_grant(1s);
  s.set("node/1", "alive", lease);
  CHECK_THROWS_AS(s.set("node/2", "x", lease + 100), ddp::StoreError);
  CHECK(ddp::test::wait_until([&] { return !s.try_get("node/1").has_value(); }, 5s));
  CHECK(ddp::test::wait_until(
      [&] {
        std::lock_guard<std::mutex> lk(mu);
        return seen.size() == 2;
      },
      5s));
  std::lock_guard<std::mutex> lk(mu);
  CHECK(seen[0].type == EventType::kPut);
  CHECK(seen[1].type == EventType::kDelete);
  CHECK(seen[1].key == "node/1");
  CHECK_THROWS_AS(s.lease_keepalive(lease), ddp::StoreError);
}

TEST_CASE("memory store: a watch from a list's revision + 1 replays what came after") {
  MemoryStore s;
  s.set("r/a", "1");
  auto listed = s.list("r/");
  s.set("r/b", "2");
  std::atomic<int> count{0};
  std::atomic<Revision> last{0};
  auto w = s.watch("r/", listed.revision + 1, [&](const WatchEvent& e) {
    last = e.revision;
    ++count;
  });
  s.set("r/c", "3");
  CHECK(ddp::test::wait_until([&] { return count == 2; }, 5s));
  CHECK(last == 3);
  w->cancel();
  s.set("r/d", "4");
  CHECK(s.num_keys() == 4);
  CHECK(count == 2);
}

TEST_CASE("memory store: a watch from a compacted revision reports an error") {
  MemoryStore s;
  for (int i = 0; i < 100'010; ++i) s.set("k", "v");
  std::atomic<bool> failed{false};
  auto w = s.watch(
      "", 1, [](const WatchEvent&) {}, [&](const std::string&) { failed = true; });
  CHECK(ddp::test::wait_until([&] { return failed.load(); }, 5s));
}
