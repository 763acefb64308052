// Static rendezvous (--nnodes=N --node_rank=R): over one in-process store, and
// for real with node 0 hosting a StoreServer and the others on TcpStore.
#include <atomic>
#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "ddp/common/error.hpp"
#include "ddp/store/job_keys.hpp"
#include "ddp/store/memory_store.hpp"
#include "ddp/store/store_server.hpp"
#include "ddp/store/tcp_store.hpp"
#include "rdzv_harness.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;
using ddp::rdzv::RoundEvent;

namespace {

ddp::rdzv::RendezvousConfig static_config(int n, int rank, std::uint16_t port = 29500) {
  auto c = ddp::test::dynamic_config(n, n);
  c.backend = "static";
  c.node_rank = rank;
  c.endpoint = ddp::Endpoint{"127.0.0.1", port};
  return c;
}

}  // namespace

TEST_CASE("static: group rank is the node rank and offsets follow each node's nproc") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  std::vector<std::unique_ptr<ddp::test::SimNode>> nodes;
  // Created in reverse so arrival order differs from node rank.
  for (int r = 2; r >= 0; --r)
    nodes.push_back(
        ddp::test::make_node(store, static_config(3, r), std::string("n").append(std::to_string(r)), r + 1));
  auto rs = ddp::test::rendezvous_all(nodes);
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const int rank = 2 - static_cast<int>(i);
    CHECK(rs[i].group_rank == rank);
    CHECK(rs[i].world_size == 6);
    CHECK(rs[i].group_world_size == 3);
    CHECK(rs[i].nodes.size() == 3);
    CHECK(rs[i].store_endpoint.to_string() == "127.0.0.1:29500");
  }
  CHECK(rs[2].rank_offset == 0);  // node rank 0, 1 worker
  CHECK(rs[1].rank_offset == 1);  // node rank 1, 2 workers
  CHECK(rs[0].rank_offset == 3);  // node rank 2, 3 workers
}

TEST_CASE("static: a failure on one node moves every node to the next round") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  std::vector<std::unique_ptr<ddp::test::SimNode>> nodes;
  for (int r = 0; r < 2; ++r)
    nodes.push_back(
        ddp::test::make_node(store, static_config(2, r), std::string("n").append(std::to_string(r))));
  auto first = ddp::test::rendezvous_all(nodes);
  nodes[0]->handler->report_failure("worker 3 killed by SIGSEGV");
  REQUIRE(ddp::test::wait_until([&] { return nodes[1]->has_event(RoundEvent::kRestartRequested); }));
  CHECK(nodes[1]->detail_of(RoundEvent::kRestartRequested).find("SIGSEGV") != std::string::npos);
  auto second = ddp::test::rendezvous_all(nodes);
  CHECK(second[0].round == first[0].round + 1);
  CHECK(second[1].round == second[0].round);
  CHECK(second[0].worker_prefix != first[0].worker_prefix);
}

TEST_CASE("static: join timeout names the node ranks that never came") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  auto cfg = static_config(3, 0);
  cfg.join_timeout = 300ms;
  auto node = ddp::test::make_node(store, cfg, "n0");
  CHECK_THAT(ddp::test::error_of<ddp::RendezvousError>([&] { node->handler->next_rendezvous(); }),
             Catch::Matchers::Contains("2 more needed: node_rank 1, 2") &&
                 Catch::Matchers::Contains("n0 (node_rank 0)"));
}

TEST_CASE("static: bad node rank and MIN:MAX are config errors naming the flag") {
  auto store = std::make_shared<ddp::store::MemoryStore>();
  CHECK_THAT(
      ddp::test::error_of<ddp::ConfigError>([&] { ddp::test::make_node(store, static_config(2, 2), "x"); }),
      Catch::Matchers::Contains("--node_rank"));
  auto cfg = static_config(2, 0);
  cfg.min_nodes = 1;
  CHECK_THAT(ddp::test::error_of<ddp::ConfigError>([&] { ddp::test::make_node(store, cfg, "x"); }),
             Catch::Matchers::Contains("--nnodes"));
}

TEST_CASE("static: node 0 hosts the store and node 1 reaches it over TCP") {
  // Port 0 is not allowed for N > 1.
  const auto port = static_cast<std::uint16_t>(ddp::test::free_port());
  std::atomic<bool> got{false};  // outlives the handlers whose callback sets it
  ddp::rdzv::NodeSpec n0{"n0", "127.0.0.1", 2};
  ddp::rdzv::NodeSpec n1{"n1", "127.0.0.1", 3};
  auto h0 = ddp::rdzv::create_handler(static_config(2, 0, port), n0);
  auto h1 = ddp::rdzv::create_handler(static_config(2, 1, port), n1);
  auto f0 = std::async(std::launch::async, [&] { return h0->next_rendezvous(); });
  auto r1 = h1->next_rendezvous();
  auto r0 = f0.get();
  CHECK(r0.world_size == 5);
  CHECK(r1.rank_offset == 2);
  CHECK(r1.store_endpoint.port == port);
  h1->set_event_callback([&](std::int64_t, RoundEvent e, const std::string&) {
    got = got || e == RoundEvent::kRestartRequested;
  });
  h0->report_failure("boom");
  CHECK(ddp::test::wait_until([&] { return got.load(); }));
}

TEST_CASE("static: with is_host=false node 0 joins a store that already runs on the master port") {
  // A store someone else runs (ddp-store, the --hosts launcher): node 0 would
  // fail to listen on its port if it still tried to host.
  ddp::store::StoreServerOptions so;
  so.host = "127.0.0.1";
  ddp::store::StoreServer server(so);
  server.start();
  auto cfg0 = static_config(2, 0, server.port());
  auto cfg1 = static_config(2, 1, server.port());
  cfg0.is_host = cfg1.is_host = false;
  auto h0 = ddp::rdzv::create_handler(cfg0, ddp::rdzv::NodeSpec{"n0", "127.0.0.1", 1});
  auto h1 = ddp::rdzv::create_handler(cfg1, ddp::rdzv::NodeSpec{"n1", "127.0.0.1", 2});
  auto f1 = std::async(std::launch::async, [&] { return h1->next_rendezvous(); });
  const auto r0 = h0->next_rendezvous();
  const auto r1 = f1.get();
  CHECK(r0.group_rank == 0);
  CHECK(r1.group_rank == 1);
  CHECK(r1.world_size == 3);
  CHECK(r0.store_endpoint.port == server.port());
  ddp::store::TcpStoreOptions co;
  co.endpoint = ddp::Endpoint{"127.0.0.1", server.port()};
  ddp::store::TcpStore check(co);
  // The round was recorded in that store.
  CHECK_FALSE(check.list("/" + cfg0.run_id + "/rdzv/").kvs.empty());
}

TEST_CASE("static: a node that cannot reach the master names it and how long it waited") {
  auto cfg = static_config(2, 1, 1);  // port 1: nobody listens there
  cfg.join_timeout = 300ms;
  CHECK_THAT(ddp::test::error_of<ddp::RendezvousError>([&] {
               ddp::rdzv::create_handler(cfg, ddp::rdzv::NodeSpec{"n1", "127.0.0.1", 1});
             }),
             Catch::Matchers::Contains("127.0.0.1:1") && Catch::Matchers::Contains("0.3s"));
}

TEST_CASE(
    "static: a store handed down that does not answer is a ConfigError naming its flag, within its bound") {
  auto cfg = static_config(2, 1, 1);  // port 1: nobody listens there
  cfg.is_host = false;
  cfg.handed_store = ddp::rdzv::RendezvousConfig::HandedStore{"--local_addr of the launching ddprun", 300ms};
  const auto start = std::chrono::steady_clock::now();
  CHECK_THAT(
      ddp::test::error_of<ddp::ConfigError>([&] {
        ddp::rdzv::create_handler(cfg, ddp::rdzv::NodeSpec{"n1", "127.0.0.1", 1});
      }),
      Catch::Matchers::Contains("127.0.0.1:1 (--local_addr of the launching ddprun) after waiting 0.3s"));
  CHECK(std::chrono::steady_clock::now() - start < 5s);  // not the 600 s join timeout
}

TEST_CASE("static: a host that closes the job keeps its store up until the waiting node has read why") {
  const auto port = static_cast<std::uint16_t>(ddp::test::free_port());
  // Node 1 (--nnodes=2) records its count first and waits for node 0; node 0
  // (--nnodes=3) finds the mismatch, closes the job and goes away at once.
  auto h0 = ddp::rdzv::create_handler(static_config(3, 0, port), ddp::rdzv::NodeSpec{"n0", "127.0.0.1", 1});
  auto h1 = ddp::rdzv::create_handler(static_config(2, 1, port), ddp::rdzv::NodeSpec{"n1", "127.0.0.1", 1});
  auto f1 = std::async(std::launch::async, [&] {
    auto error = ddp::test::error_of<ddp::RendezvousError>([&] { h1->next_rendezvous(); });
    h1.reset();  // ddprun exits: its lease goes, and its record with it
    return error;
  });
  auto store = h0->store();
  REQUIRE(ddp::test::wait_until([&] { return !store->list("/job/rdzv/round_0/node/").kvs.empty(); }));
  CHECK_THAT(ddp::test::error_of<ddp::ConfigError>([&] { h0->next_rendezvous(); }),
             Catch::Matchers::Contains("--nnodes differs between nodes"));
  store.reset();
  h0.reset();  // stops the store, after node 1 left
  CHECK_THAT(f1.get(), Catch::Matchers::Contains("--nnodes differs between nodes") &&
                           Catch::Matchers::Contains("has --nnodes=3"));
}

TEST_CASE(
    "static: a host that closes the job waits for the node that recorded its count to write its record") {
  const auto port = static_cast<std::uint16_t>(ddp::test::free_port());
  // Node 1 recorded --nnodes=2 first and is about to write its node record
  // when node 0 (--nnodes=3) finds the mismatch and closes the job.
  auto h0 = ddp::rdzv::create_handler(static_config(3, 0, port), ddp::rdzv::NodeSpec{"n0", "127.0.0.1", 1});
  ddp::store::TcpStoreOptions opts;
  opts.endpoint = ddp::Endpoint{"127.0.0.1", port};
  ddp::store::TcpStore node1(opts);
  const std::string round = "/job/rdzv/round_0/";
  REQUIRE(node1.compare_set(round + "nnodes", "", "2 1 n1") == "2 1 n1");
  CHECK_THAT(ddp::test::error_of<ddp::ConfigError>([&] { h0->next_rendezvous(); }),
             Catch::Matchers::Contains("node_rank 1 (n1) has --nnodes=2"));
  // Node 1, late: its record, what it reads next, and its exit.
  auto late = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(300ms);
    const auto record = ddp::store::keys::node_key(round, 1);
    node1.set(record, "n1");
    const auto why = node1.try_get(round + "closed");
    node1.remove(record);
    return why.value_or("");
  });
  h0.reset();  // stops the store: not before node 1 has read why
  CHECK_THAT(late.get(), Catch::Matchers::Contains("--nnodes differs between nodes"));
}
