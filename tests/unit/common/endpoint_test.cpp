#include "ddp/common/endpoint.hpp"

#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"

using ddp::parse_endpoint;

TEST_CASE("endpoint parses host and port") {
  auto ep = parse_endpoint("node1:29400", "--rdzv_endpoint");
  CHECK(ep.host == "node1");
  CHECK(ep.port == 29400);
  CHECK(ep.to_string() == "node1:29400");
}

TEST_CASE("endpoint parses bracketed ipv6") {
  auto ep = parse_endpoint("[::1]:80", "--x");
  CHECK(ep.host == "::1");
  CHECK(ep.port == 80);
  CHECK(ep.to_string() == "[::1]:80");
}

TEST_CASE("endpoint uses the default port for a bare host") {
  CHECK(parse_endpoint("localhost", "--x", 29400).port == 29400);
}

TEST_CASE("endpoint errors name the flag") {
  CHECK_THROWS_WITH(parse_endpoint("host:99999", "--master_port"),
                    Catch::Contains("--master_port") && Catch::Contains("0..65535"));
  CHECK_THROWS_AS(parse_endpoint("host", "--x"), ddp::ConfigError);
  CHECK_THROWS_AS(parse_endpoint(":80", "--x"), ddp::ConfigError);
  CHECK_THROWS_AS(parse_endpoint("::1:80", "--x"), ddp::ConfigError);
  CHECK_THROWS_AS(parse_endpoint("h:8x", "--x"), ddp::ConfigError);
}
