// Fencing (docs/rendezvous.md, "Fencing"): a node that stops hearing from the
// store is told to kill its workers before its lease can end there; the others
// start their next round no sooner than a fence margin after they saw a member's
// lease end, unless that member left on purpose. Several handlers as threads on
// one in-process store.
#include <atomic>
#include <catch2/catch.hpp>
#include <future>
#include <sstream>

#include "ddp/store/memory_store.hpp"
#include "rdzv_harness.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using ddp::rdzv::RoundEvent;
using namespace ddp::test;

namespace {

// Lease TTL 4 s, fence margin 1 s: wide enough that a thread of a loaded
// (or sanitized) run held up for a few hundred ms changes no outcome.
ddp::rdzv::RendezvousConfig fenced(int min_nodes, int max_nodes) {
  auto cfg = ddp::test::dynamic_config(min_nodes, max_nodes);
  cfg.keep_alive_interval = 2s;
  cfg.keep_alive_max_attempt = 2;
  return cfg;
}
constexpr auto kFenceMargin = 1000ms;
// Between the departure being noted and the callback's time of it.
constexpr auto kCallbackHop = 100ms;

// When `e` first reached the node; set from the handler's callback.
struct EventTime {
  std::atomic<bool> seen{false};
  Clock::time_point at{};
  void watch(SimNode& n, RoundEvent e) {
    n.handler->set_event_callback([this, e](std::int64_t, RoundEvent got, const std::string&) {
      if (got != e || seen) return;
      at = Clock::now();
      seen = true;
    });
  }
};

// next_rendezvous on every node at once; when each returned.
std::vector<Clock::time_point> rejoin(const std::vector<SimNode*>& nodes) {
  std::vector<std::future<Clock::time_point>> fs;
  for (auto* n : nodes) {
    fs.push_back(std::async(std::launch::async, [n] {
      n->handler->next_rendezvous();
      return Clock::now();
    }));
  }
  std::vector<Clock::time_point> out;
  for (auto& f : fs) out.push_back(f.get());
  return out;
}

}  // namespace

TEST_CASE("fence: a node cut off from the store is told before the store can count it gone") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  // What the callback uses, before the nodes: their monitors may call back until the nodes go.
  std::string record;
  std::atomic<bool> told{false};
  std::atomic<bool> record_there{false};
  auto nodes = make_nodes(store, fenced(2, 2), 2);
  const auto rs = ddp::test::rendezvous_all(nodes);
  record = "/job/rdzv/round_0/node/" + std::to_string(rs[1].group_rank);
  nodes[1]->handler->set_event_callback([&](std::int64_t, RoundEvent e, const std::string&) {
    if (e != RoundEvent::kStoreLost) return;
    record_there = store->try_get(record).has_value();  // its lease still holds it
    told = true;
  });
  nodes[1]->store->fail_keepalives = true;
  REQUIRE(ddp::test::wait_until([&] { return told.load(); }, 10s));
  CHECK(record_there);
  // The lease does end afterwards, and the other node sees it go.
  CHECK(ddp::test::wait_until([&] { return nodes[0]->has_event(RoundEvent::kMembershipChanged); }, 10s));
}

TEST_CASE("fence: the others' next round starts a fence margin after a silent member's lease ended") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  EventTime seen0, seen1;  // before the nodes: their monitors may call back until the nodes go
  auto nodes = make_nodes(store, fenced(2, 3), 3);
  REQUIRE(ddp::test::rendezvous_all(nodes)[0].group_world_size == 3);
  seen0.watch(*nodes[0], RoundEvent::kMembershipChanged);
  seen1.watch(*nodes[1], RoundEvent::kMembershipChanged);
  nodes[2]->store->drop_keepalives = true;  // silent: its lease runs out at the store
  REQUIRE(ddp::test::wait_until([&] { return seen0.seen && seen1.seen; }, 10s));
  const auto back = rejoin({nodes[0].get(), nodes[1].get()});
  // The callback runs just after the departure was noted: allow that hop
  // (without the fence they come back within milliseconds).
  CHECK(back[0] - seen0.at >= kFenceMargin - kCallbackHop);
  CHECK(back[1] - seen1.at >= kFenceMargin - kCallbackHop);
  // The closer passed on what was left of its fence: "<n> <workers> <rev> <ms>".
  std::istringstream closed(store->try_get("/job/rdzv/round_1/closed").value_or(""));
  long long n = 0, workers = 0, rev = 0, fence_ms = 0;
  REQUIRE(closed >> n >> workers >> rev >> fence_ms);
  CHECK(n == 2);
  CHECK(fence_ms > 0);
  CHECK(fence_ms <= kFenceMargin.count());
}

TEST_CASE("fence: a member that left on purpose, or a reported failure, holds nobody up") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto cfg = ddp::test::dynamic_config(2, 3);  // keep-alive interval 30 s: a fence would be 15 s
  auto nodes = make_nodes(store, cfg, 3);
  REQUIRE(ddp::test::rendezvous_all(nodes)[0].group_world_size == 3);

  // A node whose workers are gone leaves (ddprun exiting): its handler says so.
  nodes[2]->handler.reset();
  nodes.pop_back();
  REQUIRE(ddp::test::wait_until([&] {
    return nodes[0]->has_event(RoundEvent::kMembershipChanged) &&
           nodes[1]->has_event(RoundEvent::kMembershipChanged);
  }));
  auto start = Clock::now();
  for (auto t : rejoin({nodes[0].get(), nodes[1].get()})) CHECK(t - start < 5s);

  // A failure reported by a live node: no departure at all.
  nodes[0]->handler->report_failure("worker 0 exited with code 1");
  REQUIRE(ddp::test::wait_until([&] { return nodes[1]->has_event(RoundEvent::kRestartRequested); }));
  start = Clock::now();
  for (auto t : rejoin({nodes[0].get(), nodes[1].get()})) CHECK(t - start < 5s);
}
