// The c10d handler over the real transport: an in-process StoreServer (hosted by
// the first agent, torchrun's is_host) and one TcpStore per handler.
#include <atomic>
#include <catch2/catch.hpp>
#include <future>

#include "ddp/common/error.hpp"
#include "ddp/store/store_server.hpp"
#include "ddp/store/tcp_store.hpp"
#include "rdzv_harness.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;
using ddp::rdzv::RoundEvent;

namespace {

struct Events {
  std::mutex mu;
  std::vector<RoundEvent> seen;
  bool has(RoundEvent e) {
    std::lock_guard<std::mutex> lock(mu);
    return std::find(seen.begin(), seen.end(), e) != seen.end();
  }
  ddp::rdzv::RoundEventCallback callback() {
    return [this](std::int64_t, RoundEvent e, const std::string&) {
      std::lock_guard<std::mutex> lock(mu);
      seen.push_back(e);
    };
  }
};

}  // namespace

TEST_CASE("c10d over TCP: the first agent on the endpoint's host hosts the store, others join") {
  auto cfg = ddp::test::dynamic_config(3, 3);
  cfg.endpoint = ddp::Endpoint{"127.0.0.1", static_cast<std::uint16_t>(ddp::test::free_port())};
  // A 2 s lease: a healthy node held up on a loaded machine keeps its place;
  // the store's loss is still seen within seconds.
  cfg.keep_alive_interval = 1s;
  cfg.keep_alive_max_attempt = 2;
  Events ev1, ev2;  // outlive the handlers
  auto h0 = ddp::rdzv::create_handler(cfg, ddp::rdzv::NodeSpec{"n0", "127.0.0.1", 1});
  auto h1 = ddp::rdzv::create_handler(cfg, ddp::rdzv::NodeSpec{"n1", "127.0.0.1", 2});
  auto h2 = ddp::rdzv::create_handler(cfg, ddp::rdzv::NodeSpec{"n2", "127.0.0.1", 3});
  h1->set_event_callback(ev1.callback());
  h2->set_event_callback(ev2.callback());
  auto f0 = std::async(std::launch::async, [&] { return h0->next_rendezvous(); });
  auto f1 = std::async(std::launch::async, [&] { return h1->next_rendezvous(); });
  auto r2 = h2->next_rendezvous();
  auto r0 = f0.get();
  auto r1 = f1.get();
  CHECK(r0.world_size == 6);
  CHECK(r0.group_world_size == 3);
  CHECK(r0.rank_offset + r1.rank_offset + r2.rank_offset == (r0.group_rank == 0 ? 0 : 0) + [&] {
    // offsets are the prefix sums of nproc in group-rank order
    std::vector<std::pair<int, int>> g = {{r0.group_rank, 1}, {r1.group_rank, 2}, {r2.group_rank, 3}};
    std::sort(g.begin(), g.end());
    return 0 + g[0].second + (g[0].second + g[1].second);
  }());
  CHECK(r0.store_endpoint.port == cfg.endpoint.port);
  // Workers reach the store through the round's endpoint and prefix.
  ddp::store::TcpStoreOptions wopts;
  wopts.endpoint = r2.store_endpoint;
  ddp::store::TcpStore worker(wopts);
  CHECK(worker.list("/job/rdzv/round_0/node/").kvs.size() == 3);

  h1->report_failure("rank 1 exited with code 7");
  REQUIRE(ddp::test::wait_until([&] { return ev2.has(RoundEvent::kRestartRequested); }));

  // The hosting agent goes away: the store is gone for the others.
  h0.reset();
  REQUIRE(ddp::test::wait_until(
      [&] { return ev1.has(RoundEvent::kStoreLost) && ev2.has(RoundEvent::kStoreLost); }, 10s));
}

TEST_CASE("c10d over TCP: an unreachable endpoint is a config error naming it") {
  auto cfg = ddp::test::dynamic_config(1, 2);
  cfg.endpoint = ddp::Endpoint{"192.0.2.1", 29400};  // TEST-NET-1: never this machine
  cfg.join_timeout = 300ms;
  CHECK_THAT(ddp::test::error_of<ddp::ConfigError>([&] {
               ddp::rdzv::create_handler(cfg, ddp::rdzv::NodeSpec{"n0", "h", 1});
             }),
             Catch::Matchers::Contains("192.0.2.1:29400") && Catch::Matchers::Contains("--rdzv_endpoint"));
}

TEST_CASE("c10d over TCP: a wrong token is a config error") {
  ddp::store::StoreServerOptions o;
  o.host = "127.0.0.1";
  o.token = "right";
  ddp::store::StoreServer server(o);
  server.start();
  auto cfg = ddp::test::dynamic_config(1, 1);
  cfg.endpoint = ddp::Endpoint{"127.0.0.1", server.port()};
  cfg.token = "wrong";
  CHECK_THAT(ddp::test::error_of<ddp::ConfigError>([&] {
               ddp::rdzv::create_handler(cfg, ddp::rdzv::NodeSpec{"n0", "h", 1});
             }),
             Catch::Matchers::Contains("token"));
}

TEST_CASE("c10d over TCP: an agent opens one connection to the store, with one hello, for all its rounds") {
  ddp::store::StoreServerOptions o;
  o.host = "127.0.0.1";
  ddp::store::StoreServer server(o);
  server.start();
  auto cfg = ddp::test::dynamic_config(2, 2);
  cfg.endpoint = ddp::Endpoint{"127.0.0.1", server.port()};
  auto h0 = ddp::rdzv::create_handler(cfg, ddp::rdzv::NodeSpec{"n0", "127.0.0.1", 1});
  auto h1 = ddp::rdzv::create_handler(cfg, ddp::rdzv::NodeSpec{"n1", "127.0.0.1", 1});
  for (int round = 0; round < 2; ++round) {
    auto f0 = std::async(std::launch::async, [&] { return h0->next_rendezvous(); });
    const auto r1 = h1->next_rendezvous();
    const auto r0 = f0.get();
    CHECK(r0.world_size == 2);
    CHECK(r1.round == r0.round);
  }
  const auto m = server.metrics();
  // Each agent's connection is the one it keeps: no probe connection first.
  CHECK(m.at("requests.hello") == 2);
  CHECK(m.at("requests.ping") == 0);
  CHECK(server.stats().at("connections") == 2);
}
