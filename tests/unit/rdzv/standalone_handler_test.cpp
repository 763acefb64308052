// --standalone: one node, the store in this process on a free loopback port.
#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"
#include "ddp/rdzv/rendezvous.hpp"
#include "ddp/store/tcp_store.hpp"
#include "rdzv_harness.hpp"

TEST_CASE("standalone: each round is one node with a fresh worker prefix on a live store") {
  ddp::rdzv::RendezvousConfig cfg;
  cfg.backend = "standalone";
  cfg.run_id = "solo";
  auto h = ddp::rdzv::create_handler(cfg, ddp::rdzv::NodeSpec{"me", "localhost", 4});
  auto r0 = h->next_rendezvous();
  CHECK(r0.round == 0);
  CHECK(r0.world_size == 4);
  CHECK(r0.group_world_size == 1);
  CHECK(r0.rank_offset == 0);
  CHECK(r0.store_endpoint.host == "127.0.0.1");
  CHECK(r0.store_endpoint.port != 0);
  CHECK(r0.worker_prefix == "/solo/worker/round_0/");
  // Workers reach the store at the endpoint the round names.
  ddp::store::TcpStoreOptions opts;
  opts.endpoint = r0.store_endpoint;
  ddp::store::TcpStore worker(opts);
  worker.set(r0.worker_prefix + "x", "1");
  CHECK(h->store()->try_get(r0.worker_prefix + "x") == std::optional<std::string>("1"));

  h->report_failure("worker 2 exited 1");
  CHECK_FALSE(h->all_succeeded());
  auto r1 = h->next_rendezvous();
  CHECK(r1.round == 1);
  CHECK(r1.worker_prefix == "/solo/worker/round_1/");
  CHECK(r1.store_endpoint.port == r0.store_endpoint.port);
  h->report_success();
  CHECK(h->all_succeeded());
  h->close("done");
  CHECK_THROWS_AS(h->next_rendezvous(), ddp::RendezvousError);
}

TEST_CASE("standalone: two jobs on one machine get different ports") {
  ddp::rdzv::RendezvousConfig cfg;
  cfg.backend = "standalone";
  auto a = ddp::rdzv::create_handler(cfg, ddp::rdzv::NodeSpec{"a", "localhost", 1});
  auto b = ddp::rdzv::create_handler(cfg, ddp::rdzv::NodeSpec{"b", "localhost", 1});
  CHECK(a->next_rendezvous().store_endpoint.port != b->next_rendezvous().store_endpoint.port);
}

TEST_CASE("unknown rendezvous backend is a config error naming the flag") {
  ddp::rdzv::RendezvousConfig cfg;
  cfg.backend = "zookeeper";
  CHECK_THAT(ddp::test::error_of<ddp::ConfigError>([&] {
               ddp::rdzv::create_handler(cfg, ddp::rdzv::NodeSpec{"a", "h", 1});
             }),
             Catch::Matchers::Contains("--rdzv_backend"));
}
