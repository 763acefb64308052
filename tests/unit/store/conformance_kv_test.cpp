// Store conformance, key-value part: the same scenarios against every Store.
#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "ddp/common/error.hpp"
#include "store_backends.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using ddp::store::Store;

// Another target may run these scenarios on its own backends (the etcd tests do).
#ifndef STORE_BACKENDS
#define STORE_BACKENDS ddp::test::MemoryBackend, ddp::test::TcpBackend
#endif

TEMPLATE_TEST_CASE("set then get returns the value, and revisions grow", "[conformance]", STORE_BACKENDS) {
  TestType backend;
  Store& s = backend.store();
  const auto r1 = s.set("a", "one");
  CHECK(s.get("a", 1s) == "one");
  const auto r2 = s.set("a", std::string("two\0bytes", 9));
  CHECK(r2 > r1);
  CHECK(s.get("a", 1s) == std::string("two\0bytes", 9));
}

TEMPLATE_TEST_CASE("get blocks until another thread sets the key", "[conformance]", STORE_BACKENDS) {
  TestType backend;
  Store& s = backend.store();
  auto got = std::async(std::launch::async, [&] { return s.get("late", 10s); });
  CHECK(got.wait_for(100ms) == std::future_status::timeout);  // still waiting for the key
  s.set("late", "here");
  REQUIRE(got.wait_for(5s) == std::future_status::ready);
  CHECK(got.get() == "here");
}

TEMPLATE_TEST_CASE("get times out naming the key", "[conformance]", STORE_BACKENDS) {
  TestType backend;
  CHECK_THROWS_AS(backend.store().get("never-set", 200ms), ddp::TimeoutError);
  CHECK_THROWS_WITH(backend.store().get("never-set", 50ms), Contains("never-set") && Contains("50 ms"));
}

TEMPLATE_TEST_CASE("get and wait with a timeout past the clock's range wait for the key", "[conformance]",
                   STORE_BACKENDS) {
  TestType backend;
  Store& s = backend.store();
  // Added to now (or to the client's grace), these overflow into the past.
  for (const auto huge :
       {std::chrono::milliseconds::max(), std::chrono::milliseconds(1'000'000'000'000'000)}) {
    INFO(huge.count());
    const std::string key = "far-" + std::to_string(huge.count());
    auto got = std::async(std::launch::async, [&] { return s.get(key, huge); });
    auto waited = std::async(std::launch::async, [&] { s.wait({key + "/w"}, huge); });
    CHECK(got.wait_for(100ms) == std::future_status::timeout);
    CHECK(waited.wait_for(0ms) == std::future_status::timeout);
    s.set(key, "here");
    s.set(key + "/w", "");
    REQUIRE(got.wait_for(5s) == std::future_status::ready);
    REQUIRE(waited.wait_for(5s) == std::future_status::ready);
    CHECK(got.get() == "here");
    CHECK_NOTHROW(waited.get());
  }
}

TEMPLATE_TEST_CASE("try_get answers at once", "[conformance]", STORE_BACKENDS) {
  TestType backend;
  Store& s = backend.store();
  CHECK_FALSE(s.try_get("k").has_value());
  s.set("k", "v");
  CHECK(s.try_get("k") == std::optional<std::string>("v"));
}

TEMPLATE_TEST_CASE("add counts from zero and stores decimal text", "[conformance]", STORE_BACKENDS) {
  TestType backend;
  Store& s = backend.store();
  CHECK(s.add("n", 5) == 5);
  CHECK(s.add("n", -7) == -2);
  CHECK(s.try_get("n") == std::optional<std::string>("-2"));
  s.set("text", "abc");
  CHECK_THROWS_AS(s.add("text", 1), ddp::StoreError);
  CHECK(s.try_get("text") == std::optional<std::string>("abc"));
}

TEMPLATE_TEST_CASE("compare_set follows torch semantics", "[conformance]", STORE_BACKENDS) {
  TestType backend;
  Store& s = backend.store();
  // Missing key, non-empty expected: returns expected and sets nothing.
  CHECK(s.compare_set("c", "old", "new") == "old");
  CHECK_FALSE(s.try_get("c").has_value());
  // Missing key, empty expected: creates.
  CHECK(s.compare_set("c", "", "first") == "first");
  CHECK(s.try_get("c") == std::optional<std::string>("first"));
  // Mismatch: returns the current value, changes nothing.
  CHECK(s.compare_set("c", "wrong", "second") == "first");
  CHECK(s.try_get("c") == std::optional<std::string>("first"));
  // Match: swaps.
  CHECK(s.compare_set("c", "first", "second") == "second");
  CHECK(s.try_get("c") == std::optional<std::string>("second"));
}

TEMPLATE_TEST_CASE("remove reports whether the key existed", "[conformance]", STORE_BACKENDS) {
  TestType backend;
  Store& s = backend.store();
  s.set("gone", "x");
  CHECK(s.remove("gone"));
  CHECK_FALSE(s.remove("gone"));
  CHECK_FALSE(s.try_get("gone").has_value());
}

TEMPLATE_TEST_CASE("check is true only when every key exists", "[conformance]", STORE_BACKENDS) {
  TestType backend;
  Store& s = backend.store();
  s.set("x", "1");
  CHECK(s.check({"x"}));
  CHECK_FALSE(s.check({"x", "y"}));
  s.set("y", "2");
  CHECK(s.check({"x", "y"}));
}

TEMPLATE_TEST_CASE("wait returns once all keys exist and times out otherwise", "[conformance]",
                   STORE_BACKENDS) {
  TestType backend;
  Store& s = backend.store();
  s.set("w1", "");
  auto waited = std::async(std::launch::async, [&] { s.wait({"w1", "w2"}, 10s); });
  CHECK(waited.wait_for(100ms) == std::future_status::timeout);
  s.set("w2", "");
  REQUIRE(waited.wait_for(5s) == std::future_status::ready);
  CHECK_NOTHROW(waited.get());
  CHECK_THROWS_AS(s.wait({"w1", "w3"}, 100ms), ddp::TimeoutError);
  CHECK_THROWS_WITH(s.wait({"w3"}, 50ms), Contains("w3"));
}

TEMPLATE_TEST_CASE("multi_set and multi_get move several keys at once", "[conformance]", STORE_BACKENDS) {
  TestType backend;
  Store& s = backend.store();
  const auto rev = s.multi_set({{"m1", "a"}, {"m2", "b"}});
  CHECK(rev > 0);
  const auto got = s.multi_get({"m1", "missing", "m2"});
  REQUIRE(got.size() == 3);
  CHECK(got[0] == std::optional<std::string>("a"));
  CHECK_FALSE(got[1].has_value());
  CHECK(got[2] == std::optional<std::string>("b"));
}

TEMPLATE_TEST_CASE("append creates and extends a value", "[conformance]", STORE_BACKENDS) {
  TestType backend;
  Store& s = backend.store();
  CHECK(s.append("log", "ab") == 2);
  CHECK(s.append("log", "cde") == 5);
  CHECK(s.try_get("log") == std::optional<std::string>("abcde"));
}

TEMPLATE_TEST_CASE("num_keys counts live keys", "[conformance]", STORE_BACKENDS) {
  TestType backend;
  Store& s = backend.store();
  CHECK(s.num_keys() == 0);
  s.set("a", "");
  s.set("b", "");
  s.set("a", "again");
  CHECK(s.num_keys() == 2);
  s.remove("a");
  CHECK(s.num_keys() == 1);
}

TEMPLATE_TEST_CASE("list returns the keys under a prefix, sorted, with revisions", "[conformance]",
                   STORE_BACKENDS) {
  TestType backend;
  Store& s = backend.store();
  const auto rb = s.set("job/b", "2");
  const auto ra = s.set("job/a", "1");
  s.set("other/c", "3");
  const auto listed = s.list("job/");
  REQUIRE(listed.kvs.size() == 2);
  CHECK(listed.kvs[0].key == "job/a");
  CHECK(listed.kvs[0].value == "1");
  CHECK(listed.kvs[0].revision == ra);
  CHECK(listed.kvs[1].key == "job/b");
  CHECK(listed.kvs[1].revision == rb);
  CHECK(listed.revision >= ra);
  CHECK(s.list("").kvs.size() == 3);
  CHECK(s.list("nothing/").kvs.empty());
}

TEMPLATE_TEST_CASE("leases: keepalive, revoke deletes keys, expiry deletes keys", "[conformance]",
                   STORE_BACKENDS) {
  TestType backend;
  Store& s = backend.store();
  const auto lease = s.lease_grant(10s);
  CHECK(lease != 0);
  s.set("leased", "x", lease);
  s.set("free", "y");
  CHECK_NOTHROW(s.lease_keepalive(lease));
  s.lease_revoke(lease);
  CHECK_FALSE(s.try_get("leased").has_value());
  CHECK(s.try_get("free").has_value());
  CHECK_THROWS_AS(s.lease_keepalive(lease), ddp::StoreError);

  // Long enough for the set and the read on a loaded machine; the wait below covers it.
  const auto short_lease = s.lease_grant(1s);
  s.set("expiring", "z", short_lease);
  CHECK(s.try_get("expiring").has_value());
  // Expiry is the server's job: poll until the key vanishes.
  CHECK(ddp::test::wait_until([&] { return !s.try_get("expiring").has_value(); }, 5s));
  CHECK_THROWS_AS(s.lease_keepalive(short_lease), ddp::StoreError);
}

TEMPLATE_TEST_CASE("batch applies its requests in order, each answered or failed on its own", "[conformance]",
                   STORE_BACKENDS) {
  using ddp::store::BatchOp;
  TestType backend;
  Store& s = backend.store();
  s.set("b/text", "abc");
  const auto lease = s.lease_grant(30s);
  std::vector<BatchOp> ops;
  ops.push_back(BatchOp::set("b/a", "1"));
  ops.push_back(BatchOp::compare_set("b/a", "1", "2"));  // sees the set before it
  ops.push_back(BatchOp::compare_set("b/a", "1", "3"));  // sees "2": not applied
  ops.push_back(BatchOp::add("b/text", 1));              // not a number: only this one fails
  ops.push_back(BatchOp::add("b/n", 5));
  ops.push_back(BatchOp::set("b/leased", "x", lease));
  s.batch(ops);
  CHECK(ops[0].number > 0);
  CHECK(ops[1].result == "2");
  CHECK(ops[2].result == "2");
  CHECK(ops[3].error);
  CHECK(ops[4].number == 5);
  for (std::size_t i : {0, 1, 2, 4, 5}) CHECK_FALSE(ops[i].error);
  CHECK_THROWS_AS(ddp::store::rethrow_first_error(ops), ddp::StoreError);
  CHECK(s.try_get("b/a") == std::optional<std::string>("2"));
  CHECK(s.try_get("b/n") == std::optional<std::string>("5"));
  s.lease_revoke(lease);
  CHECK_FALSE(s.try_get("b/leased"));
}

TEMPLATE_TEST_CASE("batch reads, waits and grants a lease in the same write as its writes", "[conformance]",
                   STORE_BACKENDS) {
  using ddp::store::BatchOp;
  TestType backend;
  Store& s = backend.store();
  s.set("r/present", "v");
  std::vector<BatchOp> ops;
  ops.push_back(BatchOp::try_get("r/present"));
  ops.push_back(BatchOp::try_get("r/missing"));
  ops.push_back(BatchOp::lease_grant(30s));
  ops.push_back(BatchOp::set("r/later", "w"));
  ops.push_back(BatchOp::get("r/later", 5s));  // set just before it: answered at once
  s.batch(ops);
  ddp::store::rethrow_first_error(ops);
  CHECK(ops[0].found);
  CHECK(ops[0].result == "v");
  CHECK_FALSE(ops[1].found);
  CHECK(ops[2].number > 0);
  CHECK(ops[4].found);
  CHECK(ops[4].result == "w");
  s.set("r/leased", "x", ops[2].number);  // the lease granted is usable
  s.lease_revoke(ops[2].number);
  CHECK_FALSE(s.try_get("r/leased"));

  // A get that times out fails on its own: the requests before it still ran.
  std::vector<BatchOp> waits;
  waits.push_back(BatchOp::set("r/first", "1"));
  waits.push_back(BatchOp::get("r/never", 100ms));
  s.batch(waits);
  CHECK_FALSE(waits[0].error);
  REQUIRE(waits[1].error);
  CHECK_THROWS_AS(std::rethrow_exception(waits[1].error), ddp::TimeoutError);
  CHECK(s.try_get("r/first") == std::optional<std::string>("1"));
}
