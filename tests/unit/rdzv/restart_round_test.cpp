// Restart rounds close as soon as every live member of the previous round is
// back (docs/rendezvous.md, "Restart rounds close at once"). The last call is
// set far past the join timeout, so a round that waited for it fails the test
// with a RendezvousError instead of passing slowly.
#include <catch2/catch.hpp>
#include <future>

#include "ddp/store/memory_store.hpp"
#include "rdzv_harness.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;
using ddp::rdzv::RoundEvent;
using namespace ddp::test;

namespace {

ddp::rdzv::RendezvousConfig long_last_call(int min_nodes, int max_nodes) {
  auto cfg = ddp::test::dynamic_config(min_nodes, max_nodes);
  cfg.last_call_timeout = 60s;
  cfg.join_timeout = 10s;
  return cfg;
}

}  // namespace

TEST_CASE("c10d restart: survivors of a departed node, then of a failure, re-form without the last call") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto nodes = make_nodes(store, long_last_call(2, 4), 4);
  REQUIRE(ddp::test::rendezvous_all(nodes)[0].group_world_size == 4);  // MAX closes round 0 at once
  nodes[3]->handler.reset();                                           // leaves: its lease is revoked
  nodes.pop_back();
  REQUIRE(ddp::test::wait_until([&] {
    for (const auto& n : nodes) {
      if (!n->has_event(RoundEvent::kMembershipChanged)) return false;
    }
    return true;
  }));
  auto second = ddp::test::rendezvous_all(nodes);
  CHECK(second[0].round == 1);
  CHECK(second[0].group_world_size == 3);

  nodes[0]->handler->report_failure("worker 0 exited with code 1");
  REQUIRE(ddp::test::wait_until([&] { return nodes[1]->has_event(RoundEvent::kRestartRequested); }));
  auto third = ddp::test::rendezvous_all(nodes);
  CHECK(third[0].round == 2);
  CHECK(third[0].group_world_size == 3);
}

TEST_CASE("c10d restart: a member that stops answering is waited for only until its lease expires") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto cfg = long_last_call(2, 4);
  // A 2 s lease: a healthy node's keepalive held up on a loaded machine keeps its place.
  cfg.keep_alive_interval = 1s;
  cfg.keep_alive_max_attempt = 2;
  auto nodes = make_nodes(store, cfg, 4);
  REQUIRE(ddp::test::rendezvous_all(nodes)[0].group_world_size == 4);
  // node3 stalls (never rejoins, its lease runs out) while node0 reports a failure:
  // the others are back long before node3's record vanishes.
  nodes[3]->store->drop_keepalives = true;
  nodes[0]->handler->report_failure("worker 0 exited with code 1");
  std::vector<std::future<ddp::rdzv::RendezvousResult>> fs;
  for (int i = 0; i < 3; ++i) fs.push_back(ddp::test::rendezvous_async(*nodes[static_cast<std::size_t>(i)]));
  for (auto& f : fs) {
    auto r = f.get();
    CHECK(r.round == 1);
    CHECK(r.group_world_size == 3);
  }
}

TEST_CASE("c10d restart: a round re-formed for a newcomer still waits the last call") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto cfg = ddp::test::dynamic_config(2, 5);
  cfg.last_call_timeout = 300ms;
  auto nodes = make_nodes(store, cfg, 3);
  REQUIRE(ddp::test::rendezvous_all(nodes)[0].group_world_size == 3);
  nodes.push_back(make_node(store, cfg, "newcomer"));
  auto late = ddp::test::rendezvous_async(*nodes[3]);
  REQUIRE(ddp::test::wait_until([&] { return nodes[0]->has_event(RoundEvent::kNodesWaiting); }));
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::future<ddp::rdzv::RendezvousResult>> fs;
  for (int i = 0; i < 3; ++i) fs.push_back(ddp::test::rendezvous_async(*nodes[static_cast<std::size_t>(i)]));
  for (auto& f : fs) CHECK(f.get().group_world_size == 4);
  CHECK(late.get().group_world_size == 4);
  // A lower bound only: the round cannot have closed before its last call.
  CHECK(std::chrono::steady_clock::now() - start >= 300ms);
}

TEST_CASE("c10d: a member of a first round waits for three store round trips, the closer for a few more") {
  // Its read of the job's round with its --nnodes check and its lease grant;
  // its arrival; its record with the wait for the close. Both watches go out
  // unconfirmed: no wait.
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto cfg = ddp::test::dynamic_config(8, 8);  // the 8th arrival closes it
  cfg.list_nodes = false;
  auto nodes = make_nodes(store, cfg, 8);
  for (auto& n : nodes) n->store->reset();
  auto first = ddp::test::rendezvous_all(nodes);
  std::vector<long> trips;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    CHECK(first[i].group_world_size == 8);
    trips.push_back(nodes[i]->store->round_trips.load());
  }
  std::sort(trips.begin(), trips.end());
  INFO("round trips per member, sorted: " << Catch::Detail::stringify(trips));
  CHECK(trips[trips.size() - 2] <= 3);  // all but the one that closed
  CHECK(trips.back() <= 8);
}

TEST_CASE(
    "c10d restart: a rejoining member waits for two store round trips, the last one back for a few more") {
  // After a failure every member sends: the marker, the round pointer and its
  // arrival in one batch; its record with the wait for the close; both
  // watches of the new round, unconfirmed (no wait). Only the last one back
  // also checks and closes.
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto cfg = ddp::test::dynamic_config(2, 16);  // round 0 closes after a short last call
  cfg.list_nodes = false;
  auto nodes = make_nodes(store, cfg, 8);
  REQUIRE(ddp::test::rendezvous_all(nodes)[0].group_world_size == 8);
  nodes[0]->handler->report_failure("worker 0 exited with code 1");
  REQUIRE(ddp::test::wait_until([&] {
    for (std::size_t i = 1; i < nodes.size(); ++i) {
      if (!nodes[i]->has_event(RoundEvent::kRestartRequested)) return false;
    }
    return true;
  }));
  for (auto& n : nodes) n->store->reset();
  auto again = ddp::test::rendezvous_all(nodes);
  std::vector<long> trips;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    CHECK(again[i].round == 1);
    CHECK(again[i].group_world_size == 8);
    trips.push_back(nodes[i]->store->round_trips.load());
  }
  std::sort(trips.begin(), trips.end());
  INFO("round trips per member, sorted: " << Catch::Detail::stringify(trips));
  CHECK(trips[trips.size() - 2] <= 2);  // all but the one that closed
  CHECK(trips.back() <= 10);
}

TEST_CASE("each round event's name is the one spelling the daemon's job records read") {
  // The daemon (below rdzv) names an end record's code from the table in job_keys.hpp.
  for (std::size_t code = 0; code < std::size(ddp::store::keys::kRoundEventNames); ++code) {
    CHECK(std::string_view(ddp::rdzv::event_name(static_cast<ddp::rdzv::RoundEvent>(code))) ==
          ddp::store::keys::kRoundEventNames[code]);
  }
  CHECK(std::size(ddp::store::keys::kRoundEventNames) ==
        static_cast<std::size_t>(ddp::rdzv::RoundEvent::kLeaseLost) + 1);
}
