// Persistence under injected faults (failpoints armed in-process): what failed
// to persist is never applied, a failed snapshot leaves nothing behind.
#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"
#include "failpoints.hpp"
#include "persistence.hpp"
#include "test_support.hpp"

using namespace ddp::store;
using namespace ddp::store::server;
using ddp::Clock;

namespace {

// Disarms the points a test armed, whatever happens.
struct Disarm {
  ~Disarm() { failpoints::arm("log.write=eio*0;snapshot.rename=eio*0;log.truncate=eio*0"); }
};

}  // namespace

TEST_CASE("a write the log refuses is undone: key, revision and lease as before") {
  Disarm disarm;
  ddp::test::TempDir dir;
  const auto now = Clock::now();
  StoreCore core;
  Persistence p(dir.path().string());
  p.open(core, now);
  core.set_sink([&p](const Mutation& m) { p.append(m); });
  core.execute({Op::kSet, 1, 0, 0, {"k"}, {"old"}}, now);
  const auto lease = core.execute({Op::kLeaseGrant, 2, 0, 60000, {}, {}}, now).num;
  core.execute({Op::kSet, 3, lease, 0, {"leased"}, {"x"}}, now);
  const auto rev = core.revision();

  failpoints::arm("log.write=short*3");
  CHECK_THROWS_AS(core.execute({Op::kSet, 4, 0, 0, {"k"}, {"new"}}, now), PersistError);
  CHECK_THROWS_AS(core.execute({Op::kLeaseRevoke, 5, lease, 0, {}, {}}, now), PersistError);
  CHECK_THROWS_AS(core.execute({Op::kLeaseGrant, 6, 0, 1000, {}, {}}, now), PersistError);
  CHECK(p.degraded());
  CHECK(core.kv().find("k")->value == "old");
  CHECK(core.kv().find("leased") != nullptr);
  CHECK(core.leases().exists(lease));
  CHECK(core.leases().size() == 1);
  CHECK(core.revision() == rev);
  // Reads go on while degraded.
  CHECK(core.execute({Op::kTryGet, 7, 0, 0, {"k"}, {}}, now).status == Status::kOk);

  // Space returns: the next write succeeds, is appended after a whole record,
  // and the log replays to exactly the acknowledged state.
  CHECK(core.execute({Op::kSet, 8, 0, 0, {"k"}, {"after"}}, now).status == Status::kOk);
  CHECK_FALSE(p.degraded());
  StoreCore again;
  Persistence p2(dir.path().string());
  p2.open(again, now);
  CHECK(again.kv().find("k")->value == "after");
  CHECK(again.leases().exists(lease));
  CHECK(again.revision() == core.revision());
}

TEST_CASE("a failed snapshot leaves no snapshot.tmp and keeps the old files in use") {
  Disarm disarm;
  ddp::test::TempDir dir;
  const auto now = Clock::now();
  StoreCore core;
  Persistence p(dir.path().string(), 1024);
  p.open(core, now);
  core.set_sink([&p](const Mutation& m) { p.append(m); });
  for (int i = 0; i < 20; ++i)
    core.execute({Op::kSet, 1, 0, 0, {std::string("k").append(std::to_string(i))}, {std::string(100, 'v')}},
                 now);
  failpoints::arm("snapshot.rename=eio*1");
  CHECK_THROWS_AS(p.compact(core), PersistError);
  CHECK_FALSE(ddp::test::fs::exists(dir / "snapshot.tmp"));
  CHECK(p.wants_compaction());
  core.execute({Op::kSet, 2, 0, 0, {"later"}, {"x"}}, now);  // the log still takes writes
  p.compact(core);
  CHECK_FALSE(p.degraded());
  StoreCore again;
  Persistence p2(dir.path().string());
  p2.open(again, now);
  CHECK(again.kv().size() == 21);
}
