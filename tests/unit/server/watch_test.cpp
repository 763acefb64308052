#include <catch2/catch.hpp>

#include "store_core.hpp"
#include "watch_hub.hpp"

using namespace ddp::store;
using namespace ddp::store::server;

namespace {

// A store core whose commits are routed through a hub, as the server does.
struct Harness {
  StoreCore core{HistoryLimits{64, HistoryLimits::kDefaultMaxBytes}};
  WatchHub hub;
  std::map<WatchId, std::vector<WatchEvent>> delivered;
  ddp::Clock::time_point now = ddp::Clock::now();

  Harness() {
    core.set_sink([this](const Mutation& m) {
      for (auto& [id, events] : hub.route(events_of(m)))
        for (auto& e : events) delivered[id].push_back(e);
    });
  }
  Response run(Request r) { return core.execute(r, now); }
  // Registration and replay happen in one step, like on the server's loop.
  bool watch(WatchId id, const std::string& prefix, Revision from) {
    if (from > 0) {
      auto past = core.history_since(prefix, from);
      if (!past) return false;
      for (auto& e : *past) delivered[id].push_back(e);
    }
    hub.add(id, prefix);
    return true;
  }
};

std::vector<Revision> revisions(const std::vector<WatchEvent>& events) {
  std::vector<Revision> out;
  for (const auto& e : events) out.push_back(e.revision);
  return out;
}

}  // namespace

TEST_CASE("watchers see only their prefix, puts and deletes, in revision order") {
  Harness h;
  h.watch(1, "a/", 0);
  h.watch(2, "", 0);
  h.run({Op::kSet, 1, 0, 0, {"a/x"}, {"1"}});
  h.run({Op::kSet, 2, 0, 0, {"b/x"}, {"2"}});
  h.run({Op::kAdd, 3, 0, 5, {"a/n"}, {}});
  h.run({Op::kDelete, 4, 0, 0, {"a/x"}, {}});
  const auto& a = h.delivered[1];
  REQUIRE(a.size() == 3);
  CHECK(a[0].type == EventType::kPut);
  CHECK(a[0].value == "1");
  CHECK(a[1].key == "a/n");
  CHECK(a[1].value == "5");
  CHECK(a[2].type == EventType::kDelete);
  CHECK(revisions(a) == std::vector<Revision>{1, 3, 4});
  CHECK(revisions(h.delivered[2]) == std::vector<Revision>{1, 2, 3, 4});
  CHECK(h.hub.remove(1));
  h.run({Op::kSet, 5, 0, 0, {"a/y"}, {"1"}});
  CHECK(h.delivered[1].size() == 3);
}

TEST_CASE("no event is lost between a list and a watch from its revision + 1") {
  Harness h;
  h.run({Op::kSet, 1, 0, 0, {"r/1"}, {"a"}});
  auto listed = h.run({Op::kList, 2, 0, 0, {"r/"}, {}});
  REQUIRE(listed.items.size() == 1);
  // Changes land after the list and before the watch is registered.
  h.run({Op::kSet, 3, 0, 0, {"r/2"}, {"b"}});
  h.run({Op::kDelete, 4, 0, 0, {"r/1"}, {}});
  REQUIRE(h.watch(7, "r/", listed.revision + 1));
  h.run({Op::kSet, 5, 0, 0, {"r/3"}, {"c"}});
  const auto& got = h.delivered[7];
  REQUIRE(got.size() == 3);
  CHECK(got[0].key == "r/2");
  CHECK(got[1].key == "r/1");
  CHECK(got[1].type == EventType::kDelete);
  CHECK(got[2].key == "r/3");
  CHECK(revisions(got) == std::vector<Revision>{2, 3, 4});
}

TEST_CASE("multi_set events share one revision and reach the watcher together") {
  Harness h;
  h.watch(1, "m/", 0);
  h.run({Op::kMultiSet, 1, 0, 0, {"m/a", "m/b", "x"}, {"1", "2", "3"}});
  REQUIRE(h.delivered[1].size() == 2);
  CHECK(revisions(h.delivered[1]) == std::vector<Revision>{1, 1});
}

TEST_CASE("a watch from a revision older than the history is refused as compacted") {
  Harness h;  // history of 64 events
  for (int i = 0; i < 200; ++i)
    h.run({Op::kSet, 1, 0, 0, {std::string("k").append(std::to_string(i))}, {"v"}});
  CHECK_FALSE(h.watch(1, "", 1));
  const auto compacted = h.core.history().compacted_revision();
  CHECK(compacted >= 200 - 64);
  CHECK_FALSE(h.watch(2, "", compacted));
  REQUIRE(h.watch(3, "", compacted + 1));
  CHECK(h.delivered[3].size() == static_cast<std::size_t>(200 - compacted));
  CHECK(h.delivered[3].back().revision == 200);
}

TEST_CASE("the history is capped in key and value bytes, dropping whole revisions") {
  StoreCore core{HistoryLimits{1000, 10 * 1024}};
  const auto now = ddp::Clock::now();
  const std::string kib(1024, 'v');
  for (int i = 0; i < 50; ++i) core.execute({Op::kSet, 1, 0, 0, {"big"}, {kib}}, now);
  const auto& h = core.history();
  CHECK(h.bytes() <= 10 * 1024);
  CHECK(h.size() == 9);  // 9 x (3 + 1024) bytes fit in 10 KiB, 10 do not
  CHECK(h.compacted_revision() == 41);
  CHECK_FALSE(core.history_since("", 1));
  CHECK_FALSE(core.history_since("", 41));
  REQUIRE(core.history_since("", 42));
  CHECK(core.history_since("", 42)->size() == 9);
  // A multi-key revision goes as a whole.
  core.execute({Op::kMultiSet, 2, 0, 0, {"m1", "m2"}, {kib, kib}}, now);
  CHECK(h.bytes() <= 10 * 1024);
  CHECK(h.events().front().revision == h.compacted_revision() + 1);
}

TEST_CASE("a value larger than the whole history cap is not retained and its revision is compacted") {
  StoreCore core{HistoryLimits{1000, 4096}};
  const auto now = ddp::Clock::now();
  core.execute({Op::kSet, 1, 0, 0, {"small"}, {"x"}}, now);
  core.execute({Op::kSet, 2, 0, 0, {"huge"}, {std::string(8192, 'h')}}, now);
  CHECK(core.history().size() == 0);
  CHECK(core.history().bytes() == 0);
  CHECK(core.history().compacted_revision() == 2);
  CHECK_FALSE(core.history_since("", 2));
  REQUIRE(core.history_since("", 3));  // from now on: nothing lost
  CHECK(core.history_since("", 3)->empty());
}

TEST_CASE("visiting the history streams one revision at a time and can stop and resume") {
  StoreCore core;
  const auto now = ddp::Clock::now();
  core.execute({Op::kSet, 1, 0, 0, {"a/1"}, {"1"}}, now);
  core.execute({Op::kMultiSet, 2, 0, 0, {"a/2", "b/2", "a/3"}, {"2", "x", "3"}}, now);
  core.execute({Op::kSet, 3, 0, 0, {"b/4"}, {"4"}}, now);
  core.execute({Op::kSet, 4, 0, 0, {"a/5"}, {"5"}}, now);
  std::vector<std::pair<Revision, std::size_t>> frames;
  auto next = core.history().visit("a/", 1, [&](Revision rev, const std::vector<const WatchEvent*>& evs) {
    frames.emplace_back(rev, evs.size());
    return frames.size() < 2;
  });
  REQUIRE(next);
  CHECK(*next == 3);
  CHECK(frames == std::vector<std::pair<Revision, std::size_t>>{{1, 1}, {2, 2}});
  frames.clear();
  next = core.history().visit("a/", *next, [&](Revision rev, const std::vector<const WatchEvent*>& evs) {
    frames.emplace_back(rev, evs.size());
    return true;
  });
  REQUIRE(next);
  CHECK(*next == 5);  // past the end: a live watch takes over from here
  CHECK(frames == std::vector<std::pair<Revision, std::size_t>>{{4, 1}});
}

TEST_CASE("a forgotten prefix leaves the history, and watches that overlap it from before are compacted") {
  StoreCore core;
  const auto now = ddp::Clock::now();
  core.execute({Op::kSet, 1, 0, 0, {"/done/rdzv/a"}, {std::string(1000, 'x')}}, now);   // 1
  core.execute({Op::kSet, 2, 0, 0, {"/live/rdzv/a"}, {"1"}}, now);                      // 2
  core.execute({Op::kSet, 3, 0, 0, {"/done/agent/s"}, {std::string(1000, 'y')}}, now);  // 3
  core.execute({Op::kDelete, 4, 0, 0, {"/done/rdzv/a", "/done/agent/s"}, {}}, now);     // 4
  core.execute({Op::kSet, 5, 0, 0, {"/live/rdzv/b"}, {"2"}}, now);                      // 5
  auto& h = core.history();
  const auto bytes_before = h.bytes();
  h.forget("/done/rdzv/", 4);
  h.forget("/done/agent/", 4);
  CHECK(h.size() == 2);  // the live job's two puts
  CHECK(h.bytes() < bytes_before - 2000);
  CHECK(h.forgotten() == 2);
  CHECK(h.compacted_revision() == 0);
  // Another job's watch replays from the start as before.
  REQUIRE(core.history_since("/live/", 1));
  CHECK(core.history_since("/live/", 1)->size() == 2);
  // A watch in, or around, a forgotten prefix from before it went is compacted;
  // from after it is not.
  for (const char* prefix : {"/done/rdzv/", "/done/rdzv/a", "/done/", "/", ""}) {
    INFO(prefix);
    CHECK(h.compacted_for(prefix) == 4);
    CHECK_FALSE(core.history_since(prefix, 4));
    CHECK(core.history_since(prefix, 5));
  }
  CHECK(h.compacted_for("/live/") == 0);
  CHECK(h.compacted_for("/done/worker/") == 0);
}

TEST_CASE("past kMaxForgotten forgotten prefixes the oldest folds into an ordinary compaction") {
  StoreCore core;
  const auto now = ddp::Clock::now();
  auto& h = core.history();
  for (std::size_t i = 0; i <= EventHistory::kMaxForgotten; ++i) {
    const std::string key = "/job" + std::to_string(i) + "/rdzv/k";
    core.execute({Op::kSet, 1, 0, 0, {key}, {"v"}}, now);
    core.execute({Op::kSet, 2, 0, 0, {"/other/" + std::to_string(i)}, {"v"}}, now);
    h.forget("/job" + std::to_string(i) + "/rdzv/", core.revision());
  }
  CHECK(h.forgotten() == EventHistory::kMaxForgotten);
  CHECK(h.compacted_revision() == 2);  // the first job's forget
  CHECK(h.compacted_for("/job0/rdzv/") == 2);
  CHECK(h.compacted_for("/other/") == 2);
  CHECK(h.size() == EventHistory::kMaxForgotten);  // the other puts after revision 2
}
