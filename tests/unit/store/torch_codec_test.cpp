#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"
#include "torch_codec.hpp"

using namespace ddp::store::torch;

namespace {
std::string u64(std::uint64_t v) {
  std::string s;
  put_i64(s, static_cast<std::int64_t>(v));
  return s;
}
std::string str(const std::string& v) { return u64(v.size()) + v; }
}  // namespace

TEST_CASE("sniff tells ddp, torch 1.x and torch 2.x apart") {
  CHECK(sniff("") == Dialect::kNeedMore);
  CHECK(sniff("\xDD") == Dialect::kNeedMore);
  CHECK(sniff(std::string("\xDD" "DPS", 4)) == Dialect::kNative);
  CHECK(sniff(std::string("\xDD" "XPS", 4)) == Dialect::kUnknown);
  CHECK(sniff(std::string("\x00\xCE\xF7", 3)) == Dialect::kNeedMore);
  CHECK(sniff(std::string("\x00\xCE\xF7\x85\x3C", 5)) == Dialect::kTorchV2);
  CHECK(sniff(std::string("\x00\x04\x00\x00\x00", 5)) == Dialect::kTorchV1);  // 1.x SET
  CHECK(sniff(std::string("\x03", 1)) == Dialect::kTorchV1);                  // 1.x ADD
  CHECK(sniff("GET / HTTP/1.1") == Dialect::kUnknown);
}

TEST_CASE("torch 1.x set, add, wait and get parse in order") {
  TorchParser p(Dialect::kTorchV1, TorchLimits{});
  std::string wire;
  wire += '\x00' + str("/k") + str("v");
  wire += '\x03' + str("/n") + u64(5);
  wire += '\x05' + u64(2) + str("/a") + str("/b");
  wire += '\x02' + str("/k");
  p.feed(wire);
  auto set = p.next();
  REQUIRE(set);
  CHECK(set->op == TorchOp::kSet);
  CHECK(set->keys == std::vector<std::string>{"/k"});
  CHECK(set->values == std::vector<std::string>{"v"});
  auto add = p.next();
  REQUIRE(add);
  CHECK(add->op == TorchOp::kAdd);
  CHECK(add->delta == 5);
  auto wait = p.next();
  REQUIRE(wait);
  CHECK(wait->op == TorchOp::kWait);
  CHECK(wait->keys.size() == 2);
  auto get = p.next();
  REQUIRE(get);
  CHECK(get->op == TorchOp::kGet);
  CHECK_FALSE(p.next());
}

TEST_CASE("a command split at every byte is parsed once complete") {
  std::string wire = '\x01' + str("/key") + str("old") + str("new");
  TorchParser p(Dialect::kTorchV1, TorchLimits{});
  for (std::size_t i = 0; i + 1 < wire.size(); ++i) {
    p.feed(wire.substr(i, 1));
    CHECK_FALSE(p.next());
  }
  p.feed(wire.substr(wire.size() - 1));
  auto cmd = p.next();
  REQUIRE(cmd);
  CHECK(cmd->op == TorchOp::kCompareSet);
  CHECK(cmd->values == std::vector<std::string>{"old", "new"});
}

TEST_CASE("torch 2.x validate, ping, multi_set and cancel_wait parse") {
  TorchParser p(Dialect::kTorchV2, TorchLimits{});
  std::string wire;
  wire += std::string("\x00\xCE\xF7\x85\x3C", 5);
  wire += std::string("\x0D\x39\x30\x00\x00", 5);  // PING 12345
  wire += '\x0B' + u64(2) + str("a") + str("1") + str("b") + str("2");
  wire += '\x0C';
  p.feed(wire);
  CHECK(p.next()->op == TorchOp::kValidate);
  auto ping = p.next();
  CHECK(ping->op == TorchOp::kPing);
  CHECK(ping->word == 12345);
  auto ms = p.next();
  CHECK(ms->op == TorchOp::kMultiSet);
  CHECK(ms->keys == std::vector<std::string>{"a", "b"});
  CHECK(ms->values == std::vector<std::string>{"1", "2"});
  CHECK(p.next()->op == TorchOp::kCancelWait);
}

TEST_CASE("unknown torch query types are rejected naming the byte") {
  TorchParser v1(Dialect::kTorchV1, TorchLimits{});
  v1.feed("\x09");
  CHECK_THROWS_WITH(v1.next(), Catch::Contains("query type 9"));
  TorchParser v2(Dialect::kTorchV2, TorchLimits{});
  v2.feed("\x2A");
  CHECK_THROWS_WITH(v2.next(), Catch::Contains("query type 42"));
}

TEST_CASE("oversized torch keys and counts are rejected before buffering the body") {
  TorchParser p(Dialect::kTorchV1, TorchLimits{});
  p.feed('\x00' + u64(1ULL << 40));
  CHECK_THROWS_WITH(p.next(), Catch::Contains("exceeds the limit"));
  TorchParser q(Dialect::kTorchV2, TorchLimits{});
  q.feed('\x06' + u64(~0ULL));
  CHECK_THROWS_WITH(q.next(), Catch::Contains("key count"));
}

TEST_CASE("wrong validation magic is rejected") {
  TorchParser p(Dialect::kTorchV2, TorchLimits{});
  p.feed(std::string("\x00\x01\x02\x03\x04", 5));
  CHECK_THROWS_WITH(p.next(), Catch::Contains("VALIDATE"));
}
