#include "kv_state.hpp"

#include <catch2/catch.hpp>

#include "store_core.hpp"

using namespace ddp::store;
using namespace ddp::store::server;

TEST_CASE("kv state bumps the revision once per mutation and not for no-ops") {
  KvState kv;
  Mutation m1;
  CHECK(kv.set("a", "1", 0, m1) == 1);
  Mutation m2;
  kv.multi_set({"b", "c"}, {"2", "3"}, 0, m2);
  CHECK(m2.revision == 2);
  CHECK(m2.changes.size() == 2);
  CHECK(kv.find("c")->mod_revision == 2);
  Mutation m3;
  CHECK(kv.erase({"nope"}, m3) == 0);
  CHECK(m3.empty());
  CHECK(kv.revision() == 2);
  Mutation m4;
  CHECK(kv.erase({"a", "b", "zz"}, m4) == 2);
  CHECK(kv.revision() == 3);
  CHECK(kv.size() == 1);
}

TEST_CASE("add stores decimal text, treats a missing key as 0 and rejects non-numbers") {
  KvState kv;
  Mutation m;
  CHECK(kv.add("n", 5, m).value == 5);
  Mutation m2;
  CHECK(kv.add("n", -7, m2).value == -2);
  CHECK(kv.find("n")->value == "-2");
  Mutation m3;
  kv.set("s", "abc", 0, m3);
  Mutation m4;
  auto r = kv.add("s", 1, m4);
  CHECK(r.status == Status::kNotANumber);
  CHECK(m4.empty());
  CHECK(kv.find("s")->value == "abc");
  Mutation m5;
  kv.set("big", std::to_string(INT64_MAX), 0, m5);
  Mutation m6;
  CHECK(kv.add("big", 1, m6).status == Status::kNotANumber);
}

TEST_CASE("compare_set follows torch semantics") {
  KvState kv;
  Mutation m;
  // Missing key, non-empty expected: returns expected, sets nothing.
  auto r = kv.compare_set("k", "x", "y", 0, m);
  CHECK(r.value == "x");
  CHECK_FALSE(r.swapped);
  CHECK(kv.find("k") == nullptr);
  // Missing key, empty expected: creates.
  r = kv.compare_set("k", "", "v1", 0, m);
  CHECK(r.value == "v1");
  CHECK(r.swapped);
  // Present and equal: swaps.
  Mutation m2;
  r = kv.compare_set("k", "v1", "v2", 0, m2);
  CHECK(r.swapped);
  CHECK(kv.find("k")->value == "v2");
  // Present and different: returns current.
  Mutation m3;
  r = kv.compare_set("k", "v1", "v3", 0, m3);
  CHECK_FALSE(r.swapped);
  CHECK(r.value == "v2");
  CHECK(m3.empty());
}

TEST_CASE("append creates and extends, list returns a sorted prefix range") {
  KvState kv;
  Mutation m;
  CHECK(kv.append("log", "ab", m) == 2);
  Mutation m2;
  CHECK(kv.append("log", "cd", m2) == 4);
  CHECK(kv.find("log")->value == "abcd");
  Mutation m3;
  kv.multi_set({"p/b", "p/a", "q", "p"}, {"2", "1", "x", "0"}, 0, m3);
  auto l = kv.list("p/");
  REQUIRE(l.size() == 2);
  CHECK(l[0].key == "p/a");
  CHECK(l[1].key == "p/b");
  CHECK(kv.list("").size() == 5);
}

TEST_CASE("store core answers requests and refuses keys on an unknown lease") {
  StoreCore core;
  const auto now = ddp::Clock::now();
  Request set{Op::kSet, 1, 99, 0, {"k"}, {"v"}};
  auto resp = core.execute(set, now);
  CHECK(resp.status == Status::kLeaseNotFound);
  CHECK(core.kv().size() == 0);

  Request bad{Op::kCompareSet, 2, 0, 0, {"k"}, {"only one"}};
  CHECK(core.execute(bad, now).status == Status::kBadRequest);

  Request get{Op::kGet, 3, 0, 0, {"k"}, {}};
  CHECK(core.execute(get, now).status == Status::kNotFound);
  set.a = 0;
  CHECK(core.execute(set, now).revision == 1);
  auto got = core.execute(get, now);
  REQUIRE(got.items.size() == 1);
  CHECK(got.items[0].value == "v");
  CHECK(got.id == 3);

  Request wait{Op::kWait, 4, 0, 0, {"k", "other"}, {}};
  CHECK(core.execute(wait, now).status == Status::kNotFound);
  CHECK(core.missing(wait.keys) == std::vector<std::string>{"other"});
}
