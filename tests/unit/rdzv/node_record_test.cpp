// Node records are written to the store by every agent, and by anyone else
// with access to it: decoding one is reading outside input.
#include <catch2/catch.hpp>
#include <string>

#include "ddp/common/error.hpp"
#include "keys.hpp"

using Catch::Matchers::Equals;
using ddp::rdzv::detail::decode_node;
using ddp::rdzv::detail::decode_offer;
using ddp::rdzv::detail::encode_node;
using ddp::rdzv::detail::encode_offer;

TEST_CASE("a node record round-trips through encode and decode") {
  ddp::rdzv::NodeSpec n;
  n.node_id = "gpu1_812";
  n.host = "gpu1";
  n.local_world_size = 8;
  const auto back = decode_node(encode_node(n), "/job/rdzv/round_0/node/0");
  CHECK(back.node_id == n.node_id);
  CHECK(back.host == n.host);
  CHECK(back.local_world_size == 8);
}

TEST_CASE(
    "a node record nested or sized past its bound is refused naming the key, the bound and the record") {
  const std::string key = "/job/rdzv/round_0/node/0";
  const auto deep = R"({"id": "a", "host": )" + std::string(30000, '[') + std::string(30000, ']') + "}";
  CHECK_THROWS_WITH(decode_node(deep, key),
                    Equals("rendezvous record " + key + " nests 30001 levels deep; at most 64 are read"));
  CHECK_THROWS_WITH(decode_node(R"({"id": ")" + std::string(70000, 'x') + R"("})", key),
                    Equals("rendezvous record " + key + " is 70010 bytes; at most 65536 are read"));
  CHECK_THROWS_WITH(decode_node(R"({"id": "a"})", key),
                    Equals("rendezvous record " + key + " is not a node record"));
}

TEST_CASE("an offered place carries the lost node's record and its rank offset when known") {
  const std::string key = "/job/rdzv/round_0/offer/2/17";
  ddp::rdzv::NodeSpec n;
  n.node_id = "gpu3_40";
  n.host = "gpu3";
  n.local_world_size = 1;
  const auto back = decode_offer(encode_offer(n, 4), key);
  CHECK(back.node.node_id == "gpu3_40");
  CHECK(back.node.local_world_size == 1);
  CHECK(back.rank_offset == 4);
  CHECK(decode_offer(encode_offer(n, -1), key).rank_offset == -1);
  // An offer as a node record alone (no offset), or with one no job has, reads as unknown.
  CHECK(decode_offer(encode_node(n), key).rank_offset == -1);
  CHECK(decode_offer(R"({"id":"a","host":"h","nproc":1,"offset":-3})", key).rank_offset == -1);
  CHECK(decode_offer(R"({"id":"a","host":"h","nproc":1,"offset":99999999999})", key).rank_offset == -1);
  CHECK(decode_offer(R"({"id":"a","host":"h","nproc":1,"offset":"4"})", key).rank_offset == -1);
  CHECK_THROWS_WITH(decode_offer(R"({"offset": 4})", key),
                    Equals("rendezvous record " + key + " is not a node record"));
}
