#include "proxy_namespace.hpp"

#include <catch2/catch.hpp>

using namespace ddp::store;
using ddp::store::server::ProxyNamespace;

TEST_CASE("torch keys go under the round's prefix and come back without it") {
  ProxyNamespace ns("/job/worker/round_3/");
  CHECK(ns.to_store("/worker/attempt_0/x") == "/job/worker/round_3/worker/attempt_0/x");
  CHECK(ns.to_store("init/") == "/job/worker/round_3/init/");
  CHECK(ns.to_client("/job/worker/round_3/worker/attempt_0/x") == "/worker/attempt_0/x");
  CHECK(ns.to_client("/other/key") == "/other/key");
}

TEST_CASE("every key of a request is rewritten, values are not") {
  ProxyNamespace ns("/j/worker/round_0/");
  Request req;
  req.op = Op::kMultiSet;
  req.keys = {"/a", "/b"};
  req.values = {"/a", "/b"};
  ns.to_store(req);
  CHECK(req.keys == std::vector<std::string>{"/j/worker/round_0/a", "/j/worker/round_0/b"});
  CHECK(req.values == std::vector<std::string>{"/a", "/b"});
}

TEST_CASE("num_keys becomes a listing of the prefix and is answered with its count") {
  ProxyNamespace ns("/j/worker/round_0/");
  Request req;
  req.op = Op::kNumKeys;
  req.id = 7;
  ns.to_store(req);
  CHECK(req.op == Op::kList);
  CHECK(req.keys == std::vector<std::string>{"/j/worker/round_0/"});
  Response resp;
  resp.id = 7;
  resp.items = {Item{ItemKind::kPresent, "/j/worker/round_0/a", "1", 1},
                Item{ItemKind::kPresent, "/j/worker/round_0/b", "2", 2}};
  ns.from_store(resp);
  CHECK(resp.num == 2);
  CHECK(resp.items.empty());

  Response listing;  // another id: keys come back in the client's names
  listing.id = 8;
  listing.items = {Item{ItemKind::kPresent, "/j/worker/round_0/a", "1", 1}};
  ns.from_store(listing);
  CHECK(listing.items.at(0).key == "/a");
}
