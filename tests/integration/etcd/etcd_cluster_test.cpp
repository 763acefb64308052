// A 3-member etcd cluster on loopback: EtcdStore keeps working when a member dies.
#include "etcd_cluster.hpp"

#include <catch2/catch.hpp>
#include <mutex>

#include "ddp/common/error.hpp"
#include "ddp/store/etcd_store.hpp"

using namespace ddp::store;
using namespace std::chrono_literals;
using namespace ddp::test;

namespace {
struct Events {
  std::mutex mu;
  std::vector<WatchEvent> list;
  std::string error;
  std::size_t size() {
    std::lock_guard lock(mu);
    return list.size();
  }
};
}  // namespace

TEST_CASE("etcd cluster: after one of three members is SIGKILLed, set, get, add, leases and watches go on") {
  TempDir dir;
  EtcdCluster etcd(dir.path(), 3);
  EtcdStore s(etcd.options());
  Events seen;
  // Every connection starts at the first member: the one killed below.
  auto w = s.watch(
      "job/", 0,
      [&](const WatchEvent& ev) {
        std::lock_guard lock(seen.mu);
        seen.list.push_back(ev);
      },
      [&](const std::string& why) {
        std::lock_guard lock(seen.mu);
        seen.error = why;
      });
  s.set("job/before", "1");
  CHECK(s.add("job/n", 1) == 1);
  REQUIRE(wait_until([&] { return seen.size() == 2; }, 5s));

  etcd.kill(0);
  REQUIRE_FALSE(etcd.running(0));

  s.set("job/after", "2");
  CHECK(s.get("job/after", 5s) == "2");
  CHECK(s.add("job/n", 1) == 2);
  const auto lease = s.lease_grant(2s);
  s.set("job/leased", "x", lease);
  CHECK_NOTHROW(s.lease_keepalive(lease));
  REQUIRE(wait_until([&] { return seen.size() == 5; }, 10s));
  {
    std::lock_guard lock(seen.mu);
    std::vector<std::string> keys;
    for (const auto& ev : seen.list) keys.push_back(ev.key);
    CHECK(keys == std::vector<std::string>{"job/before", "job/n", "job/after", "job/n", "job/leased"});
    for (std::size_t i = 1; i < seen.list.size(); ++i)
      CHECK(seen.list[i].revision > seen.list[i - 1].revision);
    CHECK(seen.error.empty());
  }

  // A fresh client, the dead member still listed first, finds the live ones.
  EtcdStore fresh(etcd.options());
  CHECK(fresh.try_get("job/n") == std::optional<std::string>("2"));
}

TEST_CASE("etcd store: an endpoint with nothing listening is skipped for the next one") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  auto o = etcd.options();
  o.endpoints.insert(o.endpoints.begin(),
                     ddp::Endpoint{"127.0.0.1", static_cast<std::uint16_t>(ddp::test::free_port())});
  EtcdStore s(o);
  CHECK(s.set("k", "v") > 0);
  CHECK(s.get("k", 1s) == "v");
  Events seen;
  auto w = s.watch("", 0, [&](const WatchEvent& ev) {
    std::lock_guard lock(seen.mu);
    seen.list.push_back(ev);
  });
  s.set("k2", "v2");
  CHECK(wait_until([&] { return seen.size() == 1; }, 5s));
}
