#include "ddp/rdzv/backend.hpp"

#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"
#include "ddp/rdzv/rendezvous.hpp"

using namespace ddp::rdzv;

TEST_CASE("every backend name and alias parses to its backend, and back to its canonical name", "[backend]") {
  CHECK(parse_backend("standalone") == Backend::kStandalone);
  CHECK(parse_backend("static") == Backend::kStatic);
  CHECK(parse_backend("c10d") == Backend::kC10d);
  CHECK(parse_backend("dynamic") == Backend::kC10d);
  CHECK(parse_backend("ddp") == Backend::kC10d);
  CHECK(parse_backend("etcd") == Backend::kEtcd);
  CHECK(parse_backend("etcd-v2") == Backend::kEtcd);
  CHECK_FALSE(parse_backend("C10D"));
  CHECK_FALSE(parse_backend(""));
  CHECK(backend_name(Backend::kC10d) == "c10d");
  CHECK(backend_name(Backend::kEtcd) == "etcd");
  CHECK(ddp::rdzv::backend_choices() ==
        "static, c10d (alias dynamic, ddp), etcd (alias etcd-v2) or standalone");
}

TEST_CASE("create_handler names the known backends when given an unknown one", "[backend]") {
  ddp::rdzv::RendezvousConfig config;
  config.backend = "zookeeper";
  ddp::rdzv::NodeSpec self{"n0", "127.0.0.1", 1};
  CHECK_THROWS_WITH(ddp::rdzv::create_handler(config, self),
                    Catch::Contains("--rdzv_backend: unknown backend 'zookeeper'") &&
                        Catch::Contains("c10d (alias dynamic, ddp)"));
  CHECK_THROWS_AS(ddp::rdzv::create_handler(config, self), ddp::ConfigError);
}

TEST_CASE("etcd endpoints are parsed for the launcher through rdzv", "[backend]") {
  const auto eps = ddp::rdzv::parse_etcd_endpoints("127.0.0.1:2379,10.0.0.2:4001", "--rdzv_endpoint");
  REQUIRE(eps.size() == 2);
  CHECK(eps[1].port == 4001);
  CHECK_THROWS_AS(ddp::rdzv::parse_etcd_endpoints("", "--rdzv_endpoint"), ddp::ConfigError);
}
