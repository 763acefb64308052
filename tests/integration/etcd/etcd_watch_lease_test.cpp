// The Store contract, watch and lease half, on EtcdStore over one real etcd.
#include <catch2/catch.hpp>
#include <mutex>
#include <thread>

#include "ddp/common/error.hpp"
#include "ddp/store/etcd_store.hpp"
#include "etcd_cluster.hpp"
#include "watch_checks.hpp"

using namespace ddp::store;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using namespace ddp::test;

namespace {
// Collects a watch's events and error from its thread.
struct Recorder {
  std::mutex mu;
  std::vector<WatchEvent> events;
  std::string error;

  WatchCallback on_event() {
    return [this](const WatchEvent& ev) {
      std::lock_guard lock(mu);
      events.push_back(ev);
    };
  }
  WatchErrorCallback on_error() {
    return [this](const std::string& why) {
      std::lock_guard lock(mu);
      error = why;
    };
  }
  std::size_t size() {
    std::lock_guard lock(mu);
    return events.size();
  }
  std::vector<WatchEvent> snapshot() {
    std::lock_guard lock(mu);
    return events;
  }
};
}  // namespace

TEST_CASE("etcd watch: puts and deletes under the prefix arrive in revision order with the store's keys") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  EtcdStore s(etcd.options());
  Recorder rec;
  auto w = s.watch("w/", 0, rec.on_event(), rec.on_error());
  const auto r1 = s.set("w/a", "1");
  s.set("other/x", "not watched");
  const auto r2 = s.set("w/b", "2");
  s.remove("w/a");
  REQUIRE(wait_until([&] { return rec.size() == 3; }, 5s));
  check_put_put_delete(rec.snapshot(), r1, r2);
  CHECK(rec.error.empty());
}

TEST_CASE("etcd watch: from list().revision + 1 nothing set in between is lost, and history replays") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  EtcdStore s(etcd.options());
  const auto first = s.set("p/0", "before");
  const auto listed = s.list("p/");
  REQUIRE(listed.kvs.size() == 1);
  s.set("p/1", "between");
  Recorder rec;
  auto w = s.watch("p/", listed.revision + 1, rec.on_event());
  s.set("p/2", "after");
  REQUIRE(wait_until([&] { return rec.size() == 2; }, 5s));
  CHECK(rec.snapshot()[0].value == "between");
  CHECK(rec.snapshot()[1].value == "after");

  Recorder replay;
  auto w2 = s.watch("p/", first, replay.on_event());
  REQUIRE(wait_until([&] { return replay.size() == 3; }, 5s));
  CHECK(replay.snapshot()[0].value == "before");
}

TEST_CASE("etcd watch: a cancelled watch delivers nothing more") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  EtcdStore s(etcd.options());
  Recorder cancelled, live;
  auto w1 = s.watch("c/", 0, cancelled.on_event());
  auto w2 = s.watch("c/", 0, live.on_event());
  s.set("c/1", "x");
  REQUIRE(wait_until([&] { return cancelled.size() == 1 && live.size() == 1; }, 5s));
  w1->cancel();
  s.set("c/2", "y");
  REQUIRE(wait_until([&] { return live.size() == 2; }, 5s));
  CHECK(cancelled.size() == 1);
}

TEST_CASE("etcd watch: a start revision etcd already compacted ends the watch with an error") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  EtcdStore s(etcd.options());
  const auto first = s.set("h/k", "1");
  s.set("h/k", "2");
  const auto last = s.set("h/k", "3");
  etcd.compact(last);
  Recorder rec;
  auto w = s.watch("h/", first, rec.on_event(), rec.on_error());
  REQUIRE(wait_until(
      [&] {
        std::lock_guard l(rec.mu);
        return !rec.error.empty();
      },
      5s));
  CHECK_THAT(rec.error, Contains("compacted"));
  CHECK(rec.size() == 0);
}

TEST_CASE("etcd lease: keys vanish when it expires, watchers see the delete, keepalive reports it gone") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  EtcdStore s(etcd.options());
  // 3 s: the set and the watch are in before it ends on a loaded machine too.
  const auto lease = s.lease_grant(3s);
  CHECK(lease != 0);
  s.set("node/1", "alive", lease);
  Recorder rec;
  auto w = s.watch("node/", 0, rec.on_event());
  REQUIRE(wait_until([&] { return !s.try_get("node/1").has_value(); }, 10s));
  REQUIRE(wait_until([&] { return rec.size() == 1; }, 5s));
  CHECK(rec.snapshot()[0].type == EventType::kDelete);
  CHECK_THROWS_AS(s.lease_keepalive(lease), ddp::StoreError);
  CHECK_THROWS_WITH(s.lease_keepalive(lease), Contains(std::to_string(lease)) && Contains("not found"));
  CHECK_THROWS_AS(s.set("node/2", "late", lease), ddp::StoreError);
}

TEST_CASE("etcd lease: keepalive holds a lease past its ttl, and revoke removes its keys at once") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  EtcdStore s(etcd.options());
  // 2 s, kept alive every 250 ms: a loaded machine's pause of a second loses nothing.
  const auto lease = s.lease_grant(2s);
  s.set("k", "v", lease);
  CHECK(s.add("counter", 0) == 0);
  s.set("counter", "5", lease);
  CHECK(s.add("counter", 1) == 6);                               // add keeps the key's lease
  const auto until = std::chrono::steady_clock::now() + 4000ms;  // twice the ttl
  while (std::chrono::steady_clock::now() < until) {
    s.lease_keepalive(lease);
    std::this_thread::sleep_for(250ms);
  }
  CHECK(s.try_get("k") == std::optional<std::string>("v"));
  s.lease_revoke(lease);
  CHECK_FALSE(s.try_get("k").has_value());
  CHECK_FALSE(s.try_get("counter").has_value());
  CHECK_THROWS_AS(s.lease_revoke(lease), ddp::StoreError);
}

// Rounding a TTL up to etcd's whole seconds saturates: milliseconds::max()
// asks for the largest number of seconds, which etcd refuses, instead of
// wrapping to a negative TTL (which etcd would raise to its minimum: a lease
// of a few seconds where the caller asked for ever).
TEST_CASE(
    "etcd lease: the longest ttl is asked as whole seconds without wrapping, and etcd's refusal named") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  EtcdStore s(etcd.options());
  const auto max_seconds = std::to_string(std::chrono::milliseconds::max().count() / 1000);
  CHECK_THROWS_WITH(s.lease_grant(std::chrono::milliseconds::max()),
                    Contains("lease grant of " + max_seconds + " s") && Contains("too large lease TTL"));
}
