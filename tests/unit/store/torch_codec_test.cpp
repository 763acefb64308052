#include "torch_codec.hpp"

#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"

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
  CHECK(sniff(std::string("\xDD"
                          "DPS",
                          4)) == Dialect::kNative);
  CHECK(sniff(std::string("\xDD"
                          "XPS",
                          4)) == Dialect::kUnknown);
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

namespace {

std::string u32(std::uint32_t v) {
  std::string s;
  put_u32(s, v);
  return s;
}

struct Expected {
  TorchOp op;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  std::int64_t delta = 0;
  std::uint32_t word = 0;
};

// Every op of a dialect, as its client writes it, and what it must parse to.
std::vector<std::pair<std::string, Expected>> v1_ops() {
  return {
      {'\x00' + str("/k") + str("v"), {TorchOp::kSet, {"/k"}, {"v"}}},
      {'\x01' + str("/k") + str("old") + str("new"), {TorchOp::kCompareSet, {"/k"}, {"old", "new"}}},
      {'\x02' + str("/k"), {TorchOp::kGet, {"/k"}, {}}},
      {'\x03' + str("/n") + u64(static_cast<std::uint64_t>(-3)), {TorchOp::kAdd, {"/n"}, {}, -3}},
      {'\x04' + u64(2) + str("/a") + str("/b"), {TorchOp::kCheck, {"/a", "/b"}, {}}},
      {'\x05' + u64(1) + str("/a"), {TorchOp::kWait, {"/a"}, {}}},
      {std::string(1, '\x06'), {TorchOp::kNumKeys, {}, {}}},
      {'\x07' + str("/w"), {TorchOp::kWatchKey, {"/w"}, {}}},
      {'\x08' + str("/k"), {TorchOp::kDelete, {"/k"}, {}}},
  };
}

std::vector<std::pair<std::string, Expected>> v2_early_ops() {
  return {
      {'\x00' + str("/k") + str("v"), {TorchOp::kSet, {"/k"}, {"v"}}},
      {'\x01' + str("/k") + str("") + str("new"), {TorchOp::kCompareSet, {"/k"}, {"", "new"}}},
      {'\x02' + str("/k"), {TorchOp::kGet, {"/k"}, {}}},
      {'\x03' + str("/n") + u64(7), {TorchOp::kAdd, {"/n"}, {}, 7}},
      {'\x04' + u64(1) + str("/a"), {TorchOp::kCheck, {"/a"}, {}}},
      {'\x05' + u64(2) + str("/a") + str("/b"), {TorchOp::kWait, {"/a", "/b"}, {}}},
      {std::string(1, '\x06'), {TorchOp::kNumKeys, {}, {}}},
      {'\x07' + str("/k"), {TorchOp::kDelete, {"/k"}, {}}},
      {'\x08' + str("/k") + str("tail"), {TorchOp::kAppend, {"/k"}, {"tail"}}},
      {'\x09' + u64(2) + str("/a") + str("/b"), {TorchOp::kMultiGet, {"/a", "/b"}, {}}},
      {'\x0A' + u64(2) + str("/a") + str("1") + str("/b") + str(""),
       {TorchOp::kMultiSet, {"/a", "/b"}, {"1", ""}}},
      {std::string(1, '\x0B'), {TorchOp::kCancelWait, {}, {}}},
  };
}

std::vector<std::pair<std::string, Expected>> v2_ops() {
  return {
      {std::string("\x00\xCE\xF7\x85\x3C", 5), {TorchOp::kValidate, {}, {}, 0, kValidationMagic}},
      {'\x01' + str("/k") + str("v"), {TorchOp::kSet, {"/k"}, {"v"}}},
      {'\x02' + str("/k") + str("a") + str("b"), {TorchOp::kCompareSet, {"/k"}, {"a", "b"}}},
      {'\x03' + str("/k"), {TorchOp::kGet, {"/k"}, {}}},
      {'\x04' + str("/n") + u64(1), {TorchOp::kAdd, {"/n"}, {}, 1}},
      {'\x05' + u64(1) + str("/a"), {TorchOp::kCheck, {"/a"}, {}}},
      {'\x06' + u64(1) + str("/a"), {TorchOp::kWait, {"/a"}, {}}},
      {std::string(1, '\x07'), {TorchOp::kNumKeys, {}, {}}},
      {'\x08' + str("/k"), {TorchOp::kDelete, {"/k"}, {}}},
      {'\x09' + str("/k") + str("x"), {TorchOp::kAppend, {"/k"}, {"x"}}},
      {'\x0A' + u64(0), {TorchOp::kMultiGet, {}, {}}},
      {'\x0B' + u64(1) + str("/a") + str("1"), {TorchOp::kMultiSet, {"/a"}, {"1"}}},
      {std::string(1, '\x0C'), {TorchOp::kCancelWait, {}, {}}},
      {'\x0D' + u32(4242), {TorchOp::kPing, {}, {}, 0, 4242}},
      {'\x0E' + str("/q") + str("item"), {TorchOp::kQueuePush, {"/q"}, {"item"}}},
      {'\x0F' + str("/q"), {TorchOp::kQueuePop, {"/q"}, {}}},
      {'\x10' + str("/q"), {TorchOp::kQueueLen, {"/q"}, {}}},
      {std::string(1, '\x11'), {TorchOp::kList, {}, {}}},
      {'\x12' + str("/b") + u64(3), {TorchOp::kBarrier, {"/b"}, {}, 3}},
  };
}

void check_dialect(Dialect d, const std::vector<std::pair<std::string, Expected>>& ops) {
  std::string stream;
  for (const auto& [wire, want] : ops) stream += wire;
  // Whole stream at once, then one byte at a time: the same commands.
  for (std::size_t step : {stream.size(), std::size_t{1}, std::size_t{7}}) {
    TorchParser p(d, TorchLimits{});
    std::vector<TorchCommand> got;
    for (std::size_t i = 0; i < stream.size(); i += step) {
      p.feed(std::string_view(stream).substr(i, step));
      while (auto c = p.next()) got.push_back(std::move(*c));
    }
    CHECK(p.buffered() == 0);
    REQUIRE(got.size() == ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto& want = ops[i].second;
      INFO(dialect_name(d) << " op " << torch_op_name(want.op) << " step " << step);
      CHECK(got[i].op == want.op);
      CHECK(got[i].keys == want.keys);
      CHECK(got[i].values == want.values);
      CHECK(got[i].delta == want.delta);
      CHECK(got[i].word == want.word);
    }
  }
}

}  // namespace

TEST_CASE("every torch 1.x op parses byte for byte, whatever the read sizes") {
  check_dialect(Dialect::kTorchV1, v1_ops());
}

TEST_CASE("every torch 2.1 op (the early 2.x numbering) parses byte for byte, whatever the read sizes") {
  check_dialect(Dialect::kTorchV2Early, v2_early_ops());
}

TEST_CASE("every torch 2.x op, queues and LIST included, parses byte for byte, whatever the read sizes") {
  check_dialect(Dialect::kTorchV2, v2_ops());
}

TEST_CASE("op numbering of the three dialects") {
  CHECK(op_of(Dialect::kTorchV1, 7) == TorchOp::kWatchKey);
  CHECK(op_of(Dialect::kTorchV1, 8) == TorchOp::kDelete);
  CHECK_FALSE(op_of(Dialect::kTorchV1, 9));
  CHECK(op_of(Dialect::kTorchV2Early, 7) == TorchOp::kDelete);
  CHECK(op_of(Dialect::kTorchV2Early, 11) == TorchOp::kCancelWait);
  CHECK_FALSE(op_of(Dialect::kTorchV2Early, 12));
  CHECK(op_of(Dialect::kTorchV2, 14) == TorchOp::kQueuePush);
  CHECK(op_of(Dialect::kTorchV2, 17) == TorchOp::kList);
  CHECK(op_of(Dialect::kTorchV2, 18) == TorchOp::kBarrier);
  CHECK_FALSE(op_of(Dialect::kTorchV2, 19));
}

TEST_CASE("commands before an unknown op are returned, then the error names the op byte") {
  TorchParser p(Dialect::kTorchV2Early, TorchLimits{});
  p.feed('\x06' + std::string(1, '\x0C') + '\x06');
  auto first = p.next();
  REQUIRE(first);
  CHECK(first->op == TorchOp::kNumKeys);
  CHECK_THROWS_WITH(p.next(), Catch::Contains("query type 12 (0x0c)"));
  CHECK_THROWS(p.next());  // stays failed; the connection is closed
}

TEST_CASE("a large value arriving in small reads is parsed once and kept whole") {
  // 8 MiB in 4 KiB reads: each byte is looked at once (the old parser started
  // over on every read, quadratic in the reads of one command).
  const std::string value(8 << 20, 'x');
  const std::string wire = '\x0B' + u64(2) + str("/a") + str(value) + str("/b") + str(value);
  TorchParser p(Dialect::kTorchV2, TorchLimits{});
  std::size_t commands = 0;
  for (std::size_t i = 0; i < wire.size(); i += 4096) {
    p.feed(std::string_view(wire).substr(i, 4096));
    while (auto c = p.next()) {
      ++commands;
      REQUIRE(c->values.size() == 2);
      CHECK(c->values[1].size() == value.size());
    }
  }
  CHECK(commands == 1);
}

TEST_CASE("a value over the limit is refused on its length prefix, naming the op") {
  TorchLimits limits;
  limits.max_value_bytes = 1024;
  TorchParser p(Dialect::kTorchV2, limits);
  p.feed('\x0E' + str("/q") + u64(1025));
  CHECK_THROWS_WITH(p.next(), Catch::Contains("value of 1025 bytes exceeds the limit of 1024 in QUEUE_PUSH"));
}

TEST_CASE("a command over max_command_bytes is refused while it arrives") {
  TorchLimits limits;
  limits.max_command_bytes = 100;
  TorchParser p(Dialect::kTorchV2, limits);
  p.feed('\x0B' + u64(10));
  for (int i = 0; i < 10; ++i) p.feed(str("/k" + std::to_string(i)) + str(std::string(20, 'v')));
  CHECK_THROWS_WITH(p.next(), Catch::Contains("MULTI_SET command exceeds 100 bytes"));
}
