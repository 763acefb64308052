// The server's TCPStore codec without sockets: torch bytes in, the store
// Requests they become, and the reply bytes each Response turns into.
#include "torch_session_codec.hpp"

#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"
#include "torch_queues.hpp"

using namespace ddp::store;
using namespace ddp::store::server;

namespace {

std::string u64(std::uint64_t v) {
  std::string s;
  torch::put_i64(s, static_cast<std::int64_t>(v));
  return s;
}
std::string str(const std::string& v) { return u64(v.size()) + v; }
std::string op(int b) { return std::string(1, static_cast<char>(b)); }
const std::string kValidate("\x00\xCE\xF7\x85\x3C", 5);

std::vector<Request> feed(TorchCodec& c, const std::string& bytes) {
  std::vector<Request> out;
  c.feed(bytes, [&](Request&& r) {
    out.push_back(std::move(r));
    return true;
  });
  return out;
}

Response ok(std::uint32_t id) {
  Response r;
  r.id = id;
  return r;
}

}  // namespace

TEST_CASE("torch 2.x queue ops and LIST become store requests and torch's reply bytes") {
  TorchCodec c(Limits{}, torch::Dialect::kTorchV1);
  auto reqs = feed(c, kValidate + op(14) + str("/q") + str("v") + op(15) + str("/q") + op(15) + str("/q") +
                          op(16) + str("/q") + op(17));
  REQUIRE(reqs.size() == 5);
  CHECK(std::string(c.name()) == "torch-tcpstore-v2");
  CHECK(reqs[0].op == kOpQueuePush);
  CHECK(reqs[0].values == std::vector<std::string>{"v"});
  CHECK(reqs[1].op == kOpQueuePop);
  CHECK(reqs[3].op == kOpQueueLen);
  CHECK(reqs[4].op == Op::kList);
  CHECK(reqs[4].keys == std::vector<std::string>{""});

  std::string out;
  auto push = ok(reqs[0].id);
  push.num = 1;
  c.encode(push, out);
  CHECK(out.empty());  // QUEUE_PUSH has no reply
  auto pop = ok(reqs[1].id);
  pop.num = 1;
  pop.items.push_back({ItemKind::kPresent, "/q", "v", 0});
  c.encode(pop, out);
  CHECK(out == u64(1) + str("v"));
  out.clear();
  auto empty_pop = ok(reqs[2].id);
  c.encode(empty_pop, out);
  CHECK(out == u64(0));
  out.clear();
  auto len = ok(reqs[3].id);
  len.num = 3;
  c.encode(len, out);
  CHECK(out == u64(3));
  out.clear();
  auto list = ok(reqs[4].id);
  list.items.push_back({ItemKind::kPresent, "/a", "value-not-sent", 1});
  list.items.push_back({ItemKind::kPresent, "/b", "", 2});
  c.encode(list, out);
  CHECK(out == u64(2) + str("/a") + str("/b"));
}

TEST_CASE("a client without VALIDATE is read with the numbering the server is configured for") {
  TorchCodec v1(Limits{}, torch::Dialect::kTorchV1);
  auto a = feed(v1, op(8) + str("/k"));
  REQUIRE(a.size() == 1);
  CHECK(a[0].op == Op::kDelete);  // 1.x DELETE_KEY = 8
  CHECK(std::string(v1.name()) == "torch-tcpstore-v1");

  TorchCodec early(Limits{}, torch::Dialect::kTorchV2Early);
  auto b = feed(early, op(8) + str("/k") + str("x") + op(7) + str("/k"));
  REQUIRE(b.size() == 2);
  CHECK(b[0].op == Op::kAppend);  // 2.1 APPEND = 8
  CHECK(b[1].op == Op::kDelete);  // 2.1 DELETE_KEY = 7
  CHECK(std::string(early.name()) == "torch-tcpstore-v2-early");
}

TEST_CASE("an op outside the dialect is a ProtocolError naming the byte, after the requests before it") {
  TorchCodec c(Limits{}, torch::Dialect::kTorchV2Early);
  std::vector<Request> got;
  CHECK_THROWS_WITH(c.feed(op(6) + op(12),
                           [&](Request&& r) {
                             got.push_back(std::move(r));
                             return true;
                           }),
                    Catch::Contains("unknown query type 12 (0x0c)"));
  REQUIRE(got.size() == 1);
  CHECK(got[0].op == Op::kNumKeys);
}

TEST_CASE("torch 2.15's BARRIER is a store barrier, answered like a WAIT and cancelled by CANCEL_WAIT") {
  // The bytes torch 2.15's client sent for barrier("mykey", 1) and, timing out,
  // barrier("k2", 2) followed by CANCEL_WAIT (captured on loopback).
  const std::string arrive("\x12\x06\x00\x00\x00\x00\x00\x00\x00/mykey\x01\x00\x00\x00\x00\x00\x00\x00", 23);
  const std::string timed_out("\x12\x03\x00\x00\x00\x00\x00\x00\x00/k2\x02\x00\x00\x00\x00\x00\x00\x00", 20);
  TorchCodec c(Limits{}, torch::Dialect::kTorchV1);
  auto reqs = feed(c, kValidate + arrive + timed_out + op(12));
  REQUIRE(reqs.size() == 3);
  CHECK(reqs[0].op == Op::kBarrier);
  CHECK(reqs[0].keys == std::vector<std::string>{"/mykey"});
  CHECK(reqs[0].a == 1);
  CHECK(reqs[0].b < 0);  // the client owns the timeout
  CHECK(reqs[1].a == 2);
  CHECK(reqs[2].op == Op::kCancel);
  CHECK(reqs[2].a == reqs[1].id);

  std::string out;
  c.encode(ok(reqs[0].id), out);
  CHECK(out == std::string(1, '\x00'));  // STOP_WAITING, as torch's own server answers
  out.clear();
  Response cancelled = ok(reqs[1].id);
  cancelled.status = Status::kCancelled;
  c.encode(cancelled, out);
  c.encode(ok(reqs[2].id), out);
  CHECK(out == std::string(1, '\x01'));  // only WAIT_CANCELED, as torch's own server answers
}
