#include "reclaimer.hpp"

#include <catch2/catch.hpp>

#include "store_core.hpp"

using namespace ddp::store;
using namespace ddp::store::server;
using namespace ddp;
using namespace std::chrono_literals;

namespace {
const Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);

// Sets `key` in `core` and hands the mutation to the reclaimer; returns what it names.
std::vector<std::string> put(StoreCore& core, Reclaimer& r, const std::string& key, LeaseId lease = 0,
                             Clock::time_point now = t0) {
  std::vector<Mutation> seen;
  core.set_sink([&](const Mutation& m) { seen.push_back(m); });
  core.execute({Op::kSet, 1, lease, 0, {key}, {"v"}}, now);
  core.set_sink({});
  std::vector<std::string> out;
  for (const auto& m : seen) {
    auto old = r.on_commit(m, core.kv(), now);
    out.insert(out.end(), old.begin(), old.end());
  }
  return out;
}

void round_keys(StoreCore& core, Reclaimer& r, const std::string& run, int round) {
  std::string root = "/";
  root += run;
  const auto n = std::to_string(round);
  put(core, r, root + "/rdzv/round_" + n + "/seq");
  put(core, r, root + "/rdzv/round_" + n + "/node/0");
  put(core, r, root + "/worker/round_" + n + "/init");
}
}  // namespace

TEST_CASE("closing round R names the keys of rounds R-2 and older of that job only") {
  StoreCore core;
  Reclaimer r({2, 0ms});
  for (int round = 0; round < 3; ++round) round_keys(core, r, "job", round);
  round_keys(core, r, "other", 0);
  put(core, r, "/job/rdzv/round");
  put(core, r, "/job/agent/status/n1");
  CHECK(put(core, r, "/job/rdzv/round_1/closed").empty());
  const auto old = put(core, r, "/job/rdzv/round_2/closed");
  CHECK(old == std::vector<std::string>{"/job/rdzv/round_0/node/0", "/job/rdzv/round_0/seq",
                                        "/job/worker/round_0/init"});
  // Not a close record: a key under it, or one with the same last word elsewhere.
  CHECK(put(core, r, "/job/rdzv/round_2/ctl/closed").empty());
  CHECK(put(core, r, "/job/rdzv/closed").empty());
  CHECK(put(core, r, "/plain/key/closed").empty());
}

TEST_CASE("keep_rounds 0 keeps every round") {
  StoreCore core;
  Reclaimer r({0, 0ms});
  for (int round = 0; round < 4; ++round) round_keys(core, r, "job", round);
  CHECK(put(core, r, "/job/rdzv/round_3/closed").empty());
}

TEST_CASE("a job with no leased key is reclaimed once idle, one with a lease is kept") {
  StoreCore core;
  Reclaimer r({2, 1000ms});
  CHECK(r.sweep_period() == 250ms);
  round_keys(core, r, "done", 0);
  put(core, r, "/done/agent/status/n1");
  const auto lease = core.execute({Op::kLeaseGrant, 1, 0, 60000, {}, {}}, t0).num;
  put(core, r, "/live/rdzv/round_0/node/0", lease);
  put(core, r, "not/a/job");
  CHECK(r.idle_jobs(core.kv(), t0 + 999ms).empty());
  const auto gone = r.idle_jobs(core.kv(), t0 + 1000ms);
  CHECK(gone == std::vector<std::string>{"/done/agent/status/n1", "/done/rdzv/round_0/node/0",
                                         "/done/rdzv/round_0/seq", "/done/worker/round_0/init"});
  CHECK(r.reclaimed_jobs() == 1);
  CHECK(r.jobs() == 1);  // "live" stays watched
  // The job log's line, and its history goes too once its keys are deleted:
  // the dispatcher asks for these.
  CHECK(r.take_reclaimed_runs() == std::vector<std::pair<std::string, std::size_t>>{{"done", 4}});
  CHECK(r.take_reclaimed_runs().empty());
  CHECK(r.idle_jobs(core.kv(), t0 + 5000ms).empty());
}

TEST_CASE("jobs recovered from the data dir are adopted on the first sweep") {
  StoreCore core;
  core.execute({Op::kSet, 1, 0, 0, {"/old/rdzv/round"}, {"3"}}, t0);
  Reclaimer r({2, 1000ms});
  CHECK(r.idle_jobs(core.kv(), t0 + 10s).empty());  // adopted now: idle from here
  CHECK(r.idle_jobs(core.kv(), t0 + 11s) == std::vector<std::string>{"/old/rdzv/round"});
}

TEST_CASE("idle reclamation off names nothing") {
  StoreCore core;
  Reclaimer r({2, 0ms});
  put(core, r, "/job/rdzv/round");
  CHECK(r.sweep_period() == 0ms);
  CHECK(r.idle_jobs(core.kv(), t0 + std::chrono::hours(100)).empty());
}

TEST_CASE("the deletion of a reclaimed job does not bring it back to be reclaimed again") {
  StoreCore core;
  Reclaimer r({2, 1000ms});
  put(core, r, "/done/rdzv/round");
  const auto gone = r.idle_jobs(core.kv(), t0 + 1s);
  REQUIRE(gone.size() == 1);
  std::vector<Mutation> seen;
  core.set_sink([&](const Mutation& m) { seen.push_back(m); });
  core.erase_keys(gone);
  for (const auto& m : seen) r.on_commit(m, core.kv(), t0 + 1s);
  CHECK(r.jobs() == 0);
  CHECK(r.idle_jobs(core.kv(), t0 + 10s).empty());
  CHECK(r.reclaimed_jobs() == 1);
}
