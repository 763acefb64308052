#include "persistence.hpp"

#include <catch2/catch.hpp>
#include <fstream>

#include "ddp/common/error.hpp"
#include "test_support.hpp"

using namespace ddp::store;
using namespace ddp::store::server;
using ddp::Clock;
using ddp::Millis;

namespace {

// A core whose commits go to `p`, as on the server.
void attach(StoreCore& core, Persistence& p) {
  core.set_sink([&p](const Mutation& m) { p.append(m); });
}

}  // namespace

TEST_CASE("persistence restores keys, leases and revision from log and snapshot") {
  ddp::test::TempDir dir;
  const auto now = Clock::now();
  LeaseId lease = 0;
  {
    StoreCore core;
    Persistence p(dir.path().string());
    p.open(core, now);
    attach(core, p);
    core.execute({Op::kSet, 1, 0, 0, {"a"}, {"1"}}, now);
    lease = core.execute({Op::kLeaseGrant, 2, 0, 5000, {}, {}}, now).num;
    core.execute({Op::kSet, 3, lease, 0, {"l"}, {"x"}}, now);
    p.compact(core);  // a snapshot, then more log on top
    core.execute({Op::kAdd, 4, 0, 7, {"n"}, {}}, now);
    core.execute({Op::kDelete, 5, 0, 0, {"a"}, {}}, now);
    REQUIRE(core.revision() == 4);
  }  // no close(): as after a crash, the log tail is all there is
  StoreCore core;
  Persistence p(dir.path().string());
  const auto later = now + Millis(60000);
  p.open(core, later);
  CHECK(core.revision() == 4);
  CHECK(core.kv().find("a") == nullptr);
  CHECK(core.kv().find("n")->value == "7");
  REQUIRE(core.kv().find("l") != nullptr);
  // The lease got its full TTL from the restart: alive just before later + ttl.
  CHECK(core.expire_leases(later + Millis(4999)) == 0);
  CHECK(core.expire_leases(later + Millis(5000)) == 1);
  CHECK(core.kv().find("l") == nullptr);
  // New lease ids do not collide with restored ones.
  CHECK(core.leases().grant(Millis(10), later) > lease);
}

TEST_CASE("persistence compacts the log into a snapshot once it grows past the threshold") {
  ddp::test::TempDir dir;
  const auto now = Clock::now();
  StoreCore core;
  Persistence p(dir.path().string(), 4096);
  p.open(core, now);
  attach(core, p);
  for (int i = 0; i < 100 && !p.wants_compaction(); ++i)
    core.execute({Op::kSet, 1, 0, 0, {std::string("k").append(std::to_string(i))}, {std::string(100, 'v')}},
                 now);
  REQUIRE(p.wants_compaction());
  p.compact(core);
  CHECK_FALSE(p.wants_compaction());
  CHECK(ddp::test::fs::file_size(dir / "log") == 20);  // the v2 header alone
  StoreCore again;
  Persistence p2(dir.path().string());
  p2.open(again, now);
  CHECK(again.kv().size() == core.kv().size());
  CHECK(again.revision() == core.revision());
}

TEST_CASE("persistence creates a missing data dir 0700 and refuses a corrupt snapshot, naming the path") {
  ddp::test::TempDir dir;
  StoreCore core;
  Persistence missing((dir / "nope" / "deeper").string());
  missing.open(core, Clock::now());
  CHECK((ddp::test::fs::status(dir / "nope" / "deeper").permissions() & ddp::test::fs::perms::all) ==
        ddp::test::fs::perms::owner_all);
  ddp::test::write_file(dir / "snapshot", "DDPSNAP1 but then garbage follows");
  Persistence corrupt(dir.path().string());
  CHECK_THROWS_AS(corrupt.open(core, Clock::now()), ddp::ConfigError);
}
