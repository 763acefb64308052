#include <catch2/catch.hpp>

#include "store_core.hpp"
#include "watch_hub.hpp"

using namespace ddp::store;
using namespace ddp::store::server;

namespace {

// A store core whose commits are routed through a hub, as the server does.
struct Harness {
  StoreCore core{64};
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
  for (int i = 0; i < 200; ++i) h.run({Op::kSet, 1, 0, 0, {"k" + std::to_string(i)}, {"v"}});
  CHECK_FALSE(h.watch(1, "", 1));
  const auto compacted = h.core.history().compacted_revision();
  CHECK(compacted >= 200 - 64);
  CHECK_FALSE(h.watch(2, "", compacted));
  REQUIRE(h.watch(3, "", compacted + 1));
  CHECK(h.delivered[3].size() == static_cast<std::size_t>(200 - compacted));
  CHECK(h.delivered[3].back().revision == 200);
}
