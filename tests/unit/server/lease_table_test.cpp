#include "lease_table.hpp"

#include <catch2/catch.hpp>
#include <limits>

#include "fake_clock.hpp"
#include "store_core.hpp"

using namespace ddp::store;
using namespace ddp::store::server;
using ddp::test::t0;
using namespace ddp;

TEST_CASE("a lease expires at its ttl unless kept alive") {
  LeaseTable t;
  const auto id = t.grant(Millis(1000), t0);
  CHECK(t.next_expiry() == t0 + Millis(1000));
  CHECK(t.take_expired(t0 + Millis(999)).empty());
  CHECK(t.keepalive(id, t0 + Millis(900)) == Millis(1000));
  CHECK(t.take_expired(t0 + Millis(1500)).empty());
  auto gone = t.take_expired(t0 + Millis(1900));
  REQUIRE(gone.size() == 1);
  CHECK(gone[0].id == id);
  CHECK_FALSE(t.exists(id));
  CHECK_FALSE(t.keepalive(id, t0 + Millis(1901)).has_value());
}

TEST_CASE("keepalive of a lease past due fails even before the expiry sweep") {
  LeaseTable t;
  const auto id = t.grant(Millis(100), t0);
  CHECK_FALSE(t.keepalive(id, t0 + Millis(100)).has_value());
}

TEST_CASE("lease ids are never reused and restore keeps the id counter ahead") {
  LeaseTable t;
  auto a = t.grant(Millis(10), t0);
  t.revoke(a);
  auto b = t.grant(Millis(10), t0);
  CHECK(b != a);
  t.restore(50, Millis(10), t0);
  CHECK(t.grant(Millis(10), t0) == 51);
}

TEST_CASE("expired lease deletes its keys and emits delete events in one revision") {
  StoreCore core;
  std::vector<Mutation> seen;
  core.set_sink([&](const Mutation& m) { seen.push_back(m); });
  auto grant = core.execute({Op::kLeaseGrant, 1, 0, 500, {}, {}}, t0);
  REQUIRE(grant.status == Status::kOk);
  const auto lease = grant.num;
  core.execute({Op::kMultiSet, 2, lease, 0, {"n/a", "n/b"}, {"1", "2"}}, t0);
  core.execute({Op::kSet, 3, 0, 0, {"n/c"}, {"3"}}, t0);
  // Re-setting a key without the lease detaches it from the lease.
  core.execute({Op::kSet, 4, 0, 0, {"n/b"}, {"22"}}, t0);
  const auto rev = core.revision();

  CHECK(core.expire_leases(t0 + Millis(499)) == 0);
  CHECK(core.expire_leases(t0 + Millis(500)) == 1);
  CHECK(core.kv().find("n/a") == nullptr);
  CHECK(core.kv().find("n/b") != nullptr);
  CHECK(core.kv().find("n/c") != nullptr);
  CHECK(core.revision() == rev + 1);
  auto events = core.history_since("n/", rev + 1);
  REQUIRE(events);
  REQUIRE(events->size() == 1);
  CHECK((*events)[0].type == EventType::kDelete);
  CHECK((*events)[0].key == "n/a");
  REQUIRE_FALSE(seen.empty());
  CHECK(seen.back().changes.back().kind == Change::Kind::kLeaseRevoke);

  auto keep = core.execute({Op::kLeaseKeepAlive, 5, lease, 0, {}, {}}, t0 + Millis(501));
  CHECK(keep.status == Status::kLeaseNotFound);
}

TEST_CASE("revoking a lease deletes its keys at once") {
  StoreCore core;
  const auto lease = core.execute({Op::kLeaseGrant, 1, 0, 60000, {}, {}}, t0).num;
  core.execute({Op::kSet, 2, lease, 0, {"k"}, {"v"}}, t0);
  auto r = core.execute({Op::kLeaseRevoke, 3, lease, 0, {}, {}}, t0);
  CHECK(r.status == Status::kOk);
  CHECK(r.num == 1);
  CHECK(core.kv().size() == 0);
  CHECK(core.execute({Op::kLeaseRevoke, 4, lease, 0, {}, {}}, t0).status == Status::kLeaseNotFound);
  CHECK(core.execute({Op::kLeaseGrant, 5, 0, 0, {}, {}}, t0).status == Status::kBadRequest);
}

TEST_CASE("a lease ttl beyond one year or below 1 ms is a bad request") {
  StoreCore core;
  for (std::int64_t ttl : {std::int64_t{0}, std::int64_t{-5}, LeaseTable::kMaxTtl.count() + 1,
                           std::int64_t{9'300'000'000'000}, std::numeric_limits<std::int64_t>::max()}) {
    INFO("ttl " << ttl);
    auto r = core.execute({Op::kLeaseGrant, 1, 0, ttl, {}, {}}, t0);
    CHECK(r.status == Status::kBadRequest);
    // Whole numbers, however long: the bound and the ttl that was sent.
    CHECK(r.message == "lease_grant needs a ttl in 1.." + std::to_string(LeaseTable::kMaxTtl.count()) +
                           " ms (one year), got " + std::to_string(ttl));
  }
  CHECK(core.leases().size() == 0);
  auto ok = core.execute({Op::kLeaseGrant, 2, 0, LeaseTable::kMaxTtl.count(), {}, {}}, t0);
  CHECK(ok.status == Status::kOk);
  CHECK(core.execute({Op::kLeaseKeepAlive, 3, ok.num, 0, {}, {}}, t0 + Millis(1000)).status == Status::kOk);
}

TEST_CASE("restoring a lease whose ttl overflows the clock keeps it alive instead of wrapping") {
  LeaseTable t;
  const Millis huge{std::numeric_limits<std::int64_t>::max()};
  t.restore(7, huge, t0);
  CHECK(t.next_expiry() == Clock::time_point::max());
  CHECK(t.take_expired(t0 + std::chrono::hours(24 * 365 * 100)).empty());
  CHECK(t.keepalive(7, t0 + Millis(1)) == huge);
  CHECK(t.exists(7));
}

TEST_CASE("leases due in one tick expire in one revision, one event frame's worth per watcher") {
  StoreCore core;
  std::vector<Mutation> seen;
  core.set_sink([&](const Mutation& m) { seen.push_back(m); });
  constexpr int kAgents = 1000;
  for (int i = 0; i < kAgents; ++i) {
    const auto lease = core.execute({Op::kLeaseGrant, 1, 0, 500 + i % 50, {}, {}}, t0).num;
    core.execute({Op::kSet, 2, lease, 0, {std::string("job/node/").append(std::to_string(i))}, {"x"}}, t0);
  }
  const auto rev = core.revision();
  seen.clear();
  CHECK(core.expire_leases(t0 + Millis(600)) == kAgents);
  CHECK(core.kv().size() == 0);
  CHECK(core.leases().size() == 0);
  CHECK(core.revision() == rev + 1);
  REQUIRE(seen.size() == 1);  // one mutation: the log and every watcher see it once
  CHECK(seen[0].changes.size() == 2 * kAgents);
  auto events = core.history_since("job/node/", rev + 1);
  REQUIRE(events);
  CHECK(events->size() == kAgents);
}

TEST_CASE("a refused mass expiry leaves every lease and key in place") {
  StoreCore core;
  bool refuse = false;
  core.set_sink([&](const Mutation&) {
    if (refuse) throw std::runtime_error("disk full");
  });
  std::vector<LeaseId> leases;
  for (int i = 0; i < 3; ++i) {
    leases.push_back(core.execute({Op::kLeaseGrant, 1, 0, 100, {}, {}}, t0).num);
    core.execute({Op::kSet, 2, leases.back(), 0, {std::string("k").append(std::to_string(i))}, {"v"}}, t0);
  }
  refuse = true;
  CHECK_THROWS(core.expire_leases(t0 + Millis(100)));
  CHECK(core.kv().size() == 3);
  CHECK(core.leases().size() == 3);
  refuse = false;
  CHECK(core.expire_leases(t0 + Millis(100)) == 3);
  CHECK(core.kv().size() == 0);
}

TEST_CASE("leases of connections closed together are revoked in one revision") {
  StoreCore core;
  std::vector<LeaseId> leases;
  for (int i = 0; i < 5; ++i) {
    leases.push_back(core.execute({Op::kLeaseGrant, 1, 0, 60000, {}, {}}, t0).num);
    core.execute({Op::kSet, 2, leases.back(), 0, {std::string("n/").append(std::to_string(i))}, {"v"}}, t0);
  }
  const auto rev = core.revision();
  leases.push_back(999);  // already gone: skipped
  CHECK(core.revoke_leases(leases) == 5);
  CHECK(core.revision() == rev + 1);
  CHECK(core.kv().size() == 0);
}

TEST_CASE("with an expiry batch window only requests that name a lease reap it before the window ends") {
  StoreCore core;
  core.set_expiry_batch(Millis(100));
  const auto lease = core.execute({Op::kLeaseGrant, 1, 0, 500, {}, {}}, t0).num;
  core.execute({Op::kSet, 2, lease, 0, {"a"}, {"v"}}, t0);
  // A read inside the window leaves it for the timer's batch.
  CHECK(core.execute({Op::kTryGet, 3, 0, 0, {"a"}, {}}, t0 + Millis(550)).status == Status::kOk);
  // A keepalive names it: refused, and the lease is reaped at once.
  CHECK(core.execute({Op::kLeaseKeepAlive, 4, lease, 0, {}, {}}, t0 + Millis(550)).status ==
        Status::kLeaseNotFound);
  CHECK(core.kv().find("a") == nullptr);
}
