// The Store contract, key-value half, on EtcdStore over one real etcd.
#include "ddp/store/etcd_store.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>

#include "ddp/common/error.hpp"
#include "etcd_cluster.hpp"

using namespace ddp::store;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using ddp::test::EtcdCluster;
using ddp::test::TempDir;

TEST_CASE("etcd store: set, get, try_get and remove round-trip binary values") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  EtcdStore s(etcd.options());
  const std::string binary("\0\x01\xff\xfe value\n", 12);
  const auto r1 = s.set("k", binary);
  CHECK(r1 > 0);
  CHECK(s.get("k", 1s) == binary);
  CHECK(s.try_get("k") == std::optional<std::string>(binary));
  CHECK(s.set("k", "") > r1);
  CHECK(s.try_get("k") == std::optional<std::string>(""));
  CHECK_FALSE(s.try_get("missing").has_value());
  CHECK(s.remove("k"));
  CHECK_FALSE(s.remove("k"));
  CHECK_FALSE(s.try_get("k").has_value());
}

TEST_CASE("etcd store: get waits for a key set later, and times out naming the key") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  EtcdStore s(etcd.options());
  std::atomic<bool> getting{false};
  std::string got;
  std::thread getter([&] {
    getting = true;
    got = s.get("late", 10s);
  });
  // Either the getter's first read or its watch sees the key: both must answer.
  REQUIRE(ddp::test::wait_until([&] { return getting.load(); }));
  EtcdStore(etcd.options()).set("late", "here");
  getter.join();
  CHECK(got == "here");

  CHECK_THROWS_AS(s.get("never", 300ms), ddp::TimeoutError);
  CHECK_THROWS_WITH(s.get("never", 300ms), Contains("'never'") && Contains("300 ms"));
}

TEST_CASE("etcd store: add counts from zero, is atomic across clients and rejects non-numbers") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  EtcdStore s(etcd.options());
  CHECK(s.add("n", 3) == 3);
  CHECK(s.add("n", -1) == 2);
  CHECK(s.try_get("n") == std::optional<std::string>("2"));
  s.set("text", "v");
  CHECK_THROWS_AS(s.add("text", 1), ddp::StoreError);
  CHECK_THROWS_WITH(s.add("text", 1), Contains("'text'"));

  constexpr int kThreads = 4;
  constexpr int kAdds = 25;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      EtcdStore mine(etcd.options());
      for (int i = 0; i < kAdds; ++i) mine.add("counter", 1);
    });
  for (auto& t : threads) t.join();
  CHECK(s.try_get("counter") == std::optional<std::string>(std::to_string(kThreads * kAdds)));
}

TEST_CASE("etcd store: compare_set follows torch's semantics") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  EtcdStore s(etcd.options());
  CHECK(s.compare_set("c", "x", "y") == "x");  // missing, non-empty expected: nothing created
  CHECK_FALSE(s.try_get("c").has_value());
  CHECK(s.compare_set("c", "", "1") == "1");   // missing, empty expected: created
  CHECK(s.compare_set("c", "0", "2") == "1");  // mismatch: current value
  CHECK(s.compare_set("c", "1", "2") == "2");  // match: swapped
  CHECK(s.try_get("c") == std::optional<std::string>("2"));
  s.set("e", "");
  CHECK(s.compare_set("e", "", "filled") == "filled");  // an existing empty value matches ""
}

TEST_CASE("etcd store: append, check, multi_get and multi_set, also past etcd's 128 ops per txn") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  EtcdStore s(etcd.options());
  CHECK(s.append("l", "ab") == 2);
  CHECK(s.append("l", "c") == 3);
  CHECK(s.try_get("l") == std::optional<std::string>("abc"));

  std::vector<std::pair<std::string, std::string>> kvs;
  std::vector<std::string> keys;
  for (int i = 0; i < 300; ++i) {
    const auto n = std::to_string(i);
    kvs.emplace_back(std::string("m/").append(n), std::string("v").append(n));
    keys.push_back(kvs.back().first);
  }
  const auto rev = s.multi_set(kvs);
  CHECK(rev > 0);
  CHECK(s.check(keys));
  keys.push_back("m/none");
  CHECK_FALSE(s.check(keys));
  const auto got = s.multi_get(keys);
  REQUIRE(got.size() == 301);
  CHECK(got[0] == std::optional<std::string>("v0"));
  CHECK(got[299] == std::optional<std::string>("v299"));
  CHECK_FALSE(got[300].has_value());
  CHECK(s.list("m/").kvs.size() == 300);
}

TEST_CASE("etcd store: wait returns once every key exists and times out naming the missing ones") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  EtcdStore s(etcd.options());
  s.set("a", "1");
  CHECK_THROWS_WITH(s.wait({"a", "b", "c"}, 300ms), Contains("'b'") && Contains("'c'") && !Contains("'a'"));
  std::thread setter([&] {
    EtcdStore other(etcd.options());
    other.set("b", "2");
    other.set("c", "3");
  });
  CHECK_NOTHROW(s.wait({"a", "b", "c"}, 10s));
  setter.join();
  CHECK_NOTHROW(s.wait({"a"}, 0ms));
}

TEST_CASE("etcd store: the key prefix isolates stores: list and num_keys see only their own keys") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  EtcdStore a(etcd.options("/job-a/"));
  EtcdStore b(etcd.options("/job-b/"));
  a.set("x/2", "two");
  a.set("x/1", "one");
  a.set("y", "why");
  b.set("x/1", "other");
  CHECK(a.num_keys() == 3);
  CHECK(b.num_keys() == 1);
  CHECK(b.try_get("x/1") == std::optional<std::string>("other"));
  const auto l = a.list("x/");
  REQUIRE(l.kvs.size() == 2);
  CHECK(l.kvs[0].key == "x/1");
  CHECK(l.kvs[0].value == "one");
  CHECK(l.kvs[1].key == "x/2");
  CHECK(l.revision >= l.kvs[0].revision);
  CHECK(l.revision >= l.kvs[1].revision);
  CHECK(a.list("").kvs.size() == 3);
}

TEST_CASE("etcd store: a read at a revision etcd compacted away is a CompactedError naming the endpoint") {
  TempDir dir;
  EtcdCluster etcd(dir.path());
  EtcdStore s(etcd.options());
  const auto first = s.set("h/k", "1");
  const auto last = s.set("h/k", "2");
  etcd.compact(last);
  CHECK_THROWS_AS(s.count_at({"h/"}, first), CompactedError);
  CHECK_THROWS_WITH(s.count_at({"h/"}, first),
                    Contains(etcd.endpoint(0).to_string()) && Contains("compacted"));
  CHECK(s.count_at({"h/"}, last).counts.at(0) == 1);
}
