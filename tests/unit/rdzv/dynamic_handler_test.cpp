// The c10d dynamic rendezvous, several handlers as threads on one in-process store.
#include <algorithm>
#include <catch2/catch.hpp>
#include <future>
#include <random>
#include <set>
#include <thread>

#include "ddp/common/error.hpp"
#include "ddp/store/memory_store.hpp"
#include "rdzv_harness.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;
using ddp::rdzv::RoundEvent;
using ddp::test::make_node;
using ddp::test::make_nodes;
using ddp::test::SimNode;

namespace {

// Ranks are contiguous: sorted by group rank, each node starts where the previous ended.
void check_contiguous(const std::vector<ddp::rdzv::RendezvousResult>& rs) {
  auto sorted = rs;
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.group_rank < b.group_rank; });
  int next = 0;
  for (std::size_t g = 0; g < sorted.size(); ++g) {
    CHECK(sorted[g].group_rank == static_cast<int>(g));
    CHECK(sorted[g].rank_offset == next);
    next += sorted[g].nodes.at(static_cast<std::size_t>(sorted[g].group_rank)).local_world_size;
  }
  for (const auto& r : rs) {
    CHECK(r.world_size == next);
    CHECK(r.group_world_size == static_cast<int>(rs.size()));
    CHECK(r.round == rs[0].round);
    CHECK(r.worker_prefix == rs[0].worker_prefix);
  }
}

}  // namespace

TEST_CASE("c10d: four nodes form one round with contiguous ranks") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto nodes = make_nodes(store, ddp::test::dynamic_config(4, 4), 4);
  auto rs = ddp::test::rendezvous_all(nodes);
  check_contiguous(rs);
  CHECK(rs[0].round == 0);
  CHECK(rs[0].worker_prefix == "/job/worker/round_0/");
  std::set<std::string> ids;
  for (const auto& n : rs[0].nodes) ids.insert(n.node_id);
  CHECK(ids == std::set<std::string>{"node0", "node1", "node2", "node3"});
}

TEST_CASE("c10d: heterogeneous nproc_per_node gives contiguous global ranks") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto nodes = make_nodes(store, ddp::test::dynamic_config(4, 4), 4, {1, 2, 3, 4});
  auto rs = ddp::test::rendezvous_all(nodes);
  check_contiguous(rs);
  CHECK(rs[0].world_size == 10);
  for (std::size_t i = 0; i < rs.size(); ++i) {
    // Each node's own entry carries its own nproc.
    CHECK(rs[i].nodes.at(static_cast<std::size_t>(rs[i].group_rank)).node_id == "node" + std::to_string(i));
  }
}

TEST_CASE("c10d: MIN:MAX round closes with MIN nodes after the last call") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto cfg = ddp::test::dynamic_config(2, 4);
  cfg.last_call_timeout = 300ms;
  auto nodes = make_nodes(store, cfg, 2);
  auto rs = ddp::test::rendezvous_all(nodes);
  check_contiguous(rs);
  CHECK(rs[0].group_world_size == 2);
}

TEST_CASE("c10d: a node arriving during the last call joins the round that MIN nodes opened") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto cfg = ddp::test::dynamic_config(2, 3);
  cfg.last_call_timeout = 1h;  // the round can only close at MAX
  auto nodes = make_nodes(store, cfg, 2);
  std::vector<std::future<ddp::rdzv::RendezvousResult>> first;
  for (auto& n : nodes) first.push_back(ddp::test::rendezvous_async(*n));
  // MIN nodes have recorded themselves in round 0 and the round is still open.
  REQUIRE(ddp::test::wait_until([&] { return store->list("/job/rdzv/round_0/node/").kvs.size() == 2; }));
  CHECK(first[0].wait_for(0ms) == std::future_status::timeout);
  nodes.push_back(make_node(store, cfg, "node2"));
  auto late = ddp::test::rendezvous_async(*nodes[2]);
  std::vector<ddp::rdzv::RendezvousResult> rs = {first[0].get(), first[1].get(), late.get()};
  check_contiguous(rs);
  CHECK(rs[0].round == 0);
  CHECK(rs[0].group_world_size == 3);
}

TEST_CASE("c10d: a late joiner makes running nodes scale up into a larger round") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto cfg = ddp::test::dynamic_config(2, 3);
  auto nodes = make_nodes(store, cfg, 2);
  auto first = ddp::test::rendezvous_all(nodes);
  REQUIRE(first[0].group_world_size == 2);

  nodes.push_back(make_node(store, cfg, "late"));
  auto late = ddp::test::rendezvous_async(*nodes[2]);
  REQUIRE(ddp::test::wait_until([&] {
    return nodes[0]->has_event(RoundEvent::kNodesWaiting) && nodes[1]->has_event(RoundEvent::kNodesWaiting);
  }));
  CHECK_FALSE(nodes[0]->has_event(RoundEvent::kRestartRequested));

  auto a = ddp::test::rendezvous_async(*nodes[0]);
  auto b = ddp::test::rendezvous_async(*nodes[1]);
  std::vector<ddp::rdzv::RendezvousResult> second = {a.get(), b.get(), late.get()};
  check_contiguous(second);
  CHECK(second[0].round == 1);
  CHECK(second[0].group_world_size == 3);
  CHECK(second[0].worker_prefix == "/job/worker/round_1/");
}

TEST_CASE("c10d: a reported failure reaches every other node and all re-form together") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto nodes = make_nodes(store, ddp::test::dynamic_config(3, 3), 3);
  ddp::test::rendezvous_all(nodes);
  nodes[1]->handler->report_failure("worker 0 exited with code 1");
  REQUIRE(ddp::test::wait_until([&] {
    return nodes[0]->has_event(RoundEvent::kRestartRequested) &&
           nodes[2]->has_event(RoundEvent::kRestartRequested);
  }));
  CHECK(nodes[0]->detail_of(RoundEvent::kRestartRequested).find("node1") != std::string::npos);
  CHECK(nodes[0]->detail_of(RoundEvent::kRestartRequested).find("exited with code 1") != std::string::npos);
  CHECK_FALSE(nodes[1]->has_event(RoundEvent::kRestartRequested));  // not echoed to the reporter
  auto rs = ddp::test::rendezvous_all(nodes);
  check_contiguous(rs);
  CHECK(rs[0].round == 1);
}

TEST_CASE("c10d: a node whose lease expires is seen as a membership change") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto cfg = ddp::test::dynamic_config(2, 2);
  // A 2 s lease: node0's keepalive held up on a loaded machine keeps its place.
  cfg.keep_alive_interval = 1s;
  cfg.keep_alive_max_attempt = 2;
  auto nodes = make_nodes(store, cfg, 2);
  auto rs = ddp::test::rendezvous_all(nodes);
  nodes[1]->store->drop_keepalives = true;  // a stalled (or kill -9'd) agent
  REQUIRE(ddp::test::wait_until([&] { return nodes[0]->has_event(RoundEvent::kMembershipChanged); }, 30s));
  const int dead_rank = rs[1].group_rank;
  CHECK(nodes[0]->detail_of(RoundEvent::kMembershipChanged).find("node1") != std::string::npos);
  CHECK(nodes[0]->detail_of(RoundEvent::kMembershipChanged).find("group rank " + std::to_string(dead_rank)) !=
        std::string::npos);
}

TEST_CASE("c10d: a revoked lease (agent leaving) is seen as a membership change") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto nodes = make_nodes(store, ddp::test::dynamic_config(2, 2), 2);
  ddp::test::rendezvous_all(nodes);
  nodes[1]->handler.reset();  // destroying the handler revokes its lease
  REQUIRE(ddp::test::wait_until([&] { return nodes[0]->has_event(RoundEvent::kMembershipChanged); }));
}

TEST_CASE("c10d: a node that succeeded and left is not a failure, and all_succeeded once all did") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto nodes = make_nodes(store, ddp::test::dynamic_config(3, 3), 3);
  auto rs = ddp::test::rendezvous_all(nodes);
  nodes[0]->handler->report_success();
  CHECK_FALSE(nodes[1]->handler->all_succeeded());
  nodes[0]->handler.reset();  // leaves early: its record vanishes
  const std::string record = "/job/rdzv/round_0/node/" + std::to_string(rs[0].group_rank);
  REQUIRE(ddp::test::wait_until([&] { return !store->try_get(record).has_value(); }));
  // An event after the departure: once it arrived, the departure was handled too.
  nodes[2]->handler->report_failure("later failure");
  REQUIRE(ddp::test::wait_until([&] { return nodes[1]->has_event(RoundEvent::kRestartRequested); }));
  CHECK_FALSE(nodes[1]->has_event(RoundEvent::kMembershipChanged));
  nodes[1]->handler->report_success();
  CHECK_FALSE(nodes[1]->handler->all_succeeded());
  nodes[2]->handler->report_success();
  CHECK(nodes[1]->handler->all_succeeded());
  CHECK(nodes[2]->handler->all_succeeded());
}

TEST_CASE("c10d: join timeout names the nodes that joined and how many are missing") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto cfg = ddp::test::dynamic_config(3, 4);
  cfg.join_timeout = 3s;  // both nodes are in by then on a loaded machine too
  auto nodes = make_nodes(store, cfg, 2, {2, 1}, "host");
  std::vector<std::future<ddp::rdzv::RendezvousResult>> fs;
  for (auto& n : nodes) fs.push_back(ddp::test::rendezvous_async(*n));
  for (auto& f : fs) {
    try {
      f.get();
      FAIL("rendezvous should have timed out");
    } catch (const ddp::RendezvousError& e) {
      const std::string msg = e.what();
      CHECK(msg.find("host0 (2 workers)") != std::string::npos);
      CHECK(msg.find("host1 (1 workers)") != std::string::npos);
      CHECK(msg.find("1 more needed") != std::string::npos);
      CHECK(msg.find("run_id=job") != std::string::npos);
    }
  }
}

TEST_CASE("c10d: two run ids on one store never see each other") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto a = make_nodes(store, ddp::test::dynamic_config(2, 2, "alpha"), 2, {}, "a");
  auto b = make_nodes(store, ddp::test::dynamic_config(2, 2, "beta"), 2, {}, "b");
  auto fa = std::async(std::launch::async, [&] { return ddp::test::rendezvous_all(a); });
  auto rb = ddp::test::rendezvous_all(b);
  auto ra = fa.get();
  check_contiguous(ra);
  check_contiguous(rb);
  for (const auto& n : ra[0].nodes) CHECK(n.node_id.rfind("a", 0) == 0);
  for (const auto& n : rb[0].nodes) CHECK(n.node_id.rfind("b", 0) == 0);
  CHECK(ra[0].worker_prefix == "/alpha/worker/round_0/");
  a[0]->handler->report_failure("boom");
  REQUIRE(ddp::test::wait_until([&] { return a[1]->has_event(RoundEvent::kRestartRequested); }));
  CHECK(b[0]->take_events().empty());
  CHECK(b[1]->take_events().empty());
}

TEST_CASE("c10d: a node with different --nnodes is refused with a config error") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto first = make_node(store, ddp::test::dynamic_config(1, 1), "n0");
  first->handler->next_rendezvous();
  auto other = make_node(store, ddp::test::dynamic_config(2, 3), "n1");
  CHECK_THAT(ddp::test::error_of<ddp::ConfigError>([&] { other->handler->next_rendezvous(); }),
             Catch::Matchers::Contains("--nnodes=1:1"));
}

TEST_CASE("c10d: after close no node can join another round") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto nodes = make_nodes(store, ddp::test::dynamic_config(2, 2), 2);
  ddp::test::rendezvous_all(nodes);
  nodes[0]->handler->close("max restarts spent");
  REQUIRE(ddp::test::wait_until([&] { return nodes[1]->has_event(RoundEvent::kRestartRequested); }));
  CHECK_THAT(ddp::test::error_of<ddp::RendezvousError>([&] { nodes[1]->handler->next_rendezvous(); }),
             Catch::Matchers::Contains("max restarts spent"));
  auto newcomer = make_node(store, ddp::test::dynamic_config(2, 2), "new");
  CHECK_THROWS_AS(newcomer->handler->next_rendezvous(), ddp::RendezvousError);
}

// Round 0 of a job of `n` nodes at its maximum, on one MemoryStore, whose
// late joiners wait as hot spares to take places.
struct SpareJob {
  std::shared_ptr<ddp::store::MemoryStore> store = std::make_shared<ddp::store::MemoryStore>();
  ddp::rdzv::RendezvousConfig cfg;
  std::vector<std::unique_ptr<SimNode>> nodes;

  explicit SpareJob(int n) : cfg(ddp::test::dynamic_config(n, n)) {
    cfg.take_places = true;
    cfg.join_timeout = 10s;
    nodes = make_nodes(store, cfg, n);
    ddp::test::rendezvous_all(nodes);
  }
};

TEST_CASE("c10d: a hot spare that starts waiting just as the job finishes exits with it") {
  // The members' last success lands after the spare found the round running
  // and before it starts watching: the spare must not wait for what it missed.
  SpareJob job(2);
  auto& store = job.store;
  auto& nodes = job.nodes;
  auto spare = make_node(store, job.cfg, "spare");
  bool finished = false;
  spare->store->before_list = [&](const std::string& prefix) {
    if (prefix != "/job/rdzv/round_0/offer/" || std::exchange(finished, true)) return;
    for (auto& n : nodes) n->handler->report_success();
    REQUIRE(store->try_get("/job/rdzv/round_0/done").has_value());
  };
  const auto start = std::chrono::steady_clock::now();
  CHECK_THAT(ddp::test::error_of<ddp::JobFinished>([&] { spare->handler->next_rendezvous(); }),
             Catch::Matchers::Contains("finished while this node waited as a hot spare"));
  // At once, not at the join timeout, though the members' records are still there.
  CHECK(std::chrono::steady_clock::now() - start < 5s);
}

TEST_CASE("c10d: hot spares that come while a job of 6 nodes finishes never wait it out (100 times)") {
  // The spares come at random times within the members' last successes. Each
  // ends at once, whichever it sees: the job finished while it waited
  // (JobFinished) or before it joined (closed); never at the join timeout.
  std::mt19937 rng(12345);
  for (int rep = 0; rep < 100; ++rep) {
    CAPTURE(rep);
    SpareJob job(6);
    auto& nodes = job.nodes;
    auto spares = make_nodes(job.store, job.cfg, 3, {}, "spare");
    std::vector<std::future<std::string>> ends;
    for (auto& sp : spares) {
      const auto delay = std::chrono::microseconds(std::uniform_int_distribution<int>(0, 2400)(rng));
      ends.push_back(std::async(std::launch::async, [h = sp->handler.get(), delay]() -> std::string {
        std::this_thread::sleep_for(delay);
        try {
          h->next_rendezvous();
        } catch (const ddp::JobFinished&) {
          return "finished";
        } catch (const ddp::RendezvousError& e) {
          return std::string(e.what()).find("the job finished before this node joined") != std::string::npos
                     ? "closed"
                     : e.what();
        }
        return "joined";
      }));
    }
    std::vector<std::size_t> order = {0, 1, 2, 3, 4, 5};
    std::shuffle(order.begin(), order.end(), rng);
    for (const auto i : order) {
      std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 400)(rng)));
      nodes[i]->handler->report_success();
    }
    for (auto& f : ends) {
      REQUIRE(f.wait_for(30s) == std::future_status::ready);  // a spare that waits it out: 10 s
      const std::string end = f.get();
      CHECK((end == "finished" || end == "closed"));
    }
  }
}

TEST_CASE("c10d: store requests per agent per round do not grow with the node count") {
  auto per_agent_max = [](int n) {
    auto store = std::make_shared<ddp::store::MemoryStore>();
    auto cfg = ddp::test::dynamic_config(n, n);
    cfg.list_nodes = false;
    auto nodes = make_nodes(store, cfg, n);
    ddp::test::rendezvous_all(nodes);
    for (auto& node : nodes) node->handler->report_success();
    long max_requests = 0;
    std::vector<long> bytes;
    for (auto& node : nodes) {
      max_requests = std::max(max_requests, node->store->requests.load());
      bytes.push_back(node->store->bytes.load());
    }
    std::sort(bytes.begin(), bytes.end());
    return std::make_pair(max_requests, bytes[bytes.size() / 2]);
  };
  auto [req4, bytes4] = per_agent_max(4);
  auto [req32, bytes32] = per_agent_max(32);
  INFO("max requests n=4: " << req4 << ", n=32: " << req32 << "; median bytes n=4: " << bytes4
                            << ", n=32: " << bytes32);
  CHECK(req32 <= req4 + 1);
  // A first join reads the round, the close and its exclusion as three
  // requests in one write (one round trip): 2 more than a multi_get.
  CHECK(req32 <= 18);
  // The closer also waits for and lists every record (one agent, once); the
  // others' bytes do not depend on N (a few more digits in keys at most).
  CHECK(bytes32 <= bytes4 + 64);
}

TEST_CASE("c10d: past list_nodes_max, a member of a round of one nproc reads no node's record but its own") {
  // What a member that did not close the round sends and gets, the most of any.
  auto member_bytes = [](int n, int list_max, const std::vector<int>& nproc) {
    auto store = std::make_shared<ddp::store::MemoryStore>();
    auto cfg = ddp::test::dynamic_config(n, n);
    cfg.list_nodes_max = list_max;
    auto nodes = make_nodes(store, cfg, n, nproc);
    for (auto& x : nodes) x->store->reset();
    auto rs = ddp::test::rendezvous_all(nodes);
    check_contiguous(rs);
    std::vector<long> bytes;
    for (std::size_t i = 0; i < rs.size(); ++i) {
      const auto& r = rs[i];
      REQUIRE(r.nodes.size() == static_cast<std::size_t>(n));
      CHECK(r.nodes.at(static_cast<std::size_t>(r.group_rank)).node_id == "node" + std::to_string(i));
      bytes.push_back(nodes[i]->store->bytes.load());
    }
    const bool listed = !(n > list_max && nproc.empty());
    for (const auto& r : rs) {
      CHECK(r.nodes_listed == listed);
      // A member holds every record where it listed them, else its own alone.
      const auto held =
          std::count_if(r.nodes.begin(), r.nodes.end(), [](const auto& s) { return !s.node_id.empty(); });
      CHECK(held == (listed ? n : 1));
    }
    std::sort(bytes.begin(), bytes.end());
    return bytes[bytes.size() - 2];
  };
  const long small = member_bytes(8, 4, {});
  const long large = member_bytes(32, 4, {});
  const long listed = member_bytes(32, 64, {});
  INFO("bytes per member: 8 nodes " << small << ", 32 nodes " << large << ", 32 listed " << listed);
  CHECK(large <= small + 32);        // flat: O(1) per member
  CHECK(listed >= large + 24 * 30);  // 32 records of 30+ bytes each
  // Nodes of different counts: every offset needs every record, so they are listed whatever the size.
  std::vector<int> mixed(16, 1);
  mixed[3] = 2;
  member_bytes(16, 4, mixed);
}
