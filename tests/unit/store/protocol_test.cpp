#include "ddp/store/protocol.hpp"

#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"

using namespace ddp::store;

namespace {
std::string body_of(const std::string& frame) {
  REQUIRE(frame.size() >= 4);
  REQUIRE(decode_frame_length(frame) == frame.size() - 4);
  return frame.substr(4);
}
}  // namespace

TEST_CASE("request round trips through the codec") {
  Request req;
  req.op = Op::kCompareSet;
  req.id = 77;
  req.a = -3;
  req.b = 1LL << 40;
  req.keys = {"k", std::string("\0bin", 4)};
  req.values = {"", std::string(1000, 'x')};
  std::string frame;
  encode_request(req, frame);
  auto got = decode_request(body_of(frame), Limits{});
  CHECK(got.op == req.op);
  CHECK(got.id == 77);
  CHECK(got.a == -3);
  CHECK(got.b == (1LL << 40));
  CHECK(got.keys == req.keys);
  CHECK(got.values == req.values);
}

TEST_CASE("response round trips through the codec") {
  Response resp;
  resp.id = 5;
  resp.status = Status::kEvent;
  resp.revision = 12;
  resp.num = -1;
  resp.message = "hello";
  resp.items = {{ItemKind::kPut, "a", "1", 3}, {ItemKind::kDelete, "b", "", 4}};
  std::string frame;
  encode_response(resp, frame);
  auto got = decode_response(body_of(frame), Limits{});
  CHECK(got.id == 5);
  CHECK(got.status == Status::kEvent);
  CHECK(got.revision == 12);
  CHECK(got.num == -1);
  CHECK(got.message == "hello");
  REQUIRE(got.items.size() == 2);
  CHECK(got.items[1].kind == ItemKind::kDelete);
  CHECK(got.items[1].key == "b");
  CHECK(got.items[0].revision == 3);
}

TEST_CASE("every truncation of a request is rejected") {
  Request req;
  req.op = Op::kSet;
  req.keys = {"key"};
  req.values = {"value"};
  std::string frame;
  encode_request(req, frame);
  auto body = body_of(frame);
  for (std::size_t n = 0; n < body.size(); ++n) {
    CHECK_THROWS_AS(decode_request(body.substr(0, n), Limits{}), ddp::ProtocolError);
  }
}

TEST_CASE("trailing bytes are rejected") {
  Request req;
  std::string frame;
  encode_request(req, frame);
  CHECK_THROWS_WITH(decode_request(body_of(frame) + "x", Limits{}), Catch::Contains("trailing"));
}

TEST_CASE("unknown op is rejected") {
  Request req;
  std::string frame;
  encode_request(req, frame);
  auto body = body_of(frame);
  body[0] = 99;
  CHECK_THROWS_WITH(decode_request(body, Limits{}), Catch::Contains("unknown op 99"));
  body[0] = 0;
  CHECK_THROWS_AS(decode_request(body, Limits{}), ddp::ProtocolError);
}

TEST_CASE("oversized key is rejected before allocation") {
  Limits limits;
  limits.max_key_bytes = 8;
  Request req;
  req.op = Op::kSet;
  req.keys = {std::string(9, 'k')};
  std::string frame;
  encode_request(req, frame);
  CHECK_THROWS_WITH(decode_request(body_of(frame), limits), Catch::Contains("exceeds the limit"));
}

TEST_CASE("absurd key count is rejected without allocating") {
  // op, id, a, b, then a key count of 0xFFFFFFFF and nothing else.
  std::string body(1 + 4 + 8 + 8, '\0');
  body[0] = static_cast<char>(Op::kCheck);
  body += std::string("\xFF\xFF\xFF\xFF", 4);
  Limits limits;
  CHECK_THROWS_AS(decode_request(body, limits), ddp::ProtocolError);
  limits.max_keys_per_request = UINT32_MAX;
  CHECK_THROWS_WITH(decode_request(body, limits), Catch::Contains("does not fit"));
}

TEST_CASE("absurd string length is rejected without allocating") {
  std::string body(1 + 4 + 8 + 8, '\0');
  body[0] = static_cast<char>(Op::kSet);
  body += std::string("\x01\x00\x00\x00", 4);  // one key
  body += std::string("\xF0\xFF\xFF\x7F", 4);  // of ~2 GiB
  Limits limits;
  limits.max_key_bytes = UINT32_MAX;
  CHECK_THROWS_WITH(decode_request(body, limits), Catch::Contains("truncated"));
}

namespace {
Item deletion(std::string key, std::int64_t revision = 7) {
  Item i;
  i.kind = ItemKind::kDelete;
  i.key = std::move(key);
  i.revision = revision;
  return i;
}
}  // namespace

TEST_CASE("numbered deletions of one stem compact to runs and expand back to the same keys") {
  std::vector<Item> items;
  for (int n : {3, 0, 1, 2, 7, 9, 8}) items.push_back(deletion("job/r/node/" + std::to_string(n)));
  const auto packed = compact_deletions(items);
  REQUIRE(packed.size() == 1);
  CHECK(packed[0].kind == ItemKind::kDeleteRuns);
  CHECK(packed[0].key == "job/r/node/");
  CHECK(packed[0].value == "0-3,7-9");
  CHECK(packed[0].revision == 7);
  CHECK(deletions_in(packed[0]) == 7);
  // Through the codec, as a watcher reads it.
  Response resp;
  resp.status = Status::kEvent;
  resp.items = packed;
  std::string frame;
  encode_response(resp, frame);
  const auto back = decode_response(body_of(frame), Limits{});
  std::vector<std::string> keys;
  for (const auto& d : expand_delete_runs(back.items.at(0))) {
    CHECK(d.kind == ItemKind::kDelete);
    CHECK(d.revision == 7);
    keys.push_back(d.key);
  }
  CHECK(keys == std::vector<std::string>{"job/r/node/0", "job/r/node/1", "job/r/node/2", "job/r/node/3",
                                         "job/r/node/7", "job/r/node/8", "job/r/node/9"});
}

TEST_CASE("puts, unnumbered keys, leading zeros and a stem's lone deletion are left as they are") {
  std::vector<Item> items;
  Item put;
  put.kind = ItemKind::kPut;
  put.key = "n/5";
  put.value = "v";
  items.push_back(put);
  items.push_back(deletion("n/name"));
  items.push_back(deletion("n/007"));
  items.push_back(deletion("m/4"));
  items.push_back(deletion("n/1"));
  items.push_back(deletion("n/2"));
  const auto packed = compact_deletions(items);
  REQUIRE(packed.size() == 5);
  CHECK(packed[0].kind == ItemKind::kPut);
  CHECK(packed[1].key == "n/name");
  CHECK(packed[2].key == "n/007");
  CHECK(packed[3].key == "m/4");
  CHECK(packed[3].kind == ItemKind::kDelete);
  CHECK(packed[4].kind == ItemKind::kDeleteRuns);
  CHECK(packed[4].value == "1-2");
  CHECK(deletions_in(packed[0]) == 0);
  CHECK(deletions_in(packed[1]) == 1);
}

TEST_CASE("a stem with more deletions than one runs item may hold is split") {
  std::vector<Item> items;
  const auto n = static_cast<std::int64_t>(kMaxKeysPerDeleteRuns) + 10;
  for (std::int64_t i = 0; i < n; ++i) items.push_back(deletion("k/" + std::to_string(i * 2)));
  const auto packed = compact_deletions(items);
  REQUIRE(packed.size() == 2);
  CHECK(deletions_in(packed[0]) == kMaxKeysPerDeleteRuns);
  CHECK(deletions_in(packed[1]) == 10);
}

TEST_CASE("malformed or oversized delete runs are refused") {
  for (const char* bad : {"", "1-", "-1", "a", "01", "3-1", "1,1", "2,1", "1-3,3", "1;2", "0-65536"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_delete_runs(bad), ddp::ProtocolError);
  }
  CHECK(parse_delete_runs("0-65535").size() == 1);
  // The decoder refuses such an item before anyone expands it.
  Response resp;
  resp.status = Status::kEvent;
  Item item;
  item.kind = ItemKind::kDeleteRuns;
  item.key = "k/";
  item.value = "0-999999999999";
  resp.items.push_back(item);
  std::string frame;
  encode_response(resp, frame);
  CHECK_THROWS_AS(decode_response(body_of(frame), Limits{}), ddp::ProtocolError);
}

TEST_CASE("an EVENT frame's delete runs may stand for no more keys than the frame could carry plain") {
  // The forged frame: 200 valid items of 65,536 keys each, 13.1M keys in about 3 KB.
  Response forged;
  forged.status = Status::kEvent;
  for (int i = 0; i < 200; ++i) {
    Item item;
    item.kind = ItemKind::kDeleteRuns;
    item.key = "k/";
    item.value = "0-65535";
    forged.items.push_back(item);
  }
  std::string frame;
  encode_response(forged, frame);
  CHECK(frame.size() < 8192);
  try {
    decode_response(body_of(frame), Limits{});
    FAIL("the forged frame was accepted");
  } catch (const ddp::ProtocolError& e) {
    CHECK_THAT(e.what(), Catch::Contains("delete runs stand for more keys than a frame of 83886080 bytes"));
  }

  // What a server sends for a mass expiry of 100,000 node records fits.
  std::vector<Item> deletions;
  for (int i = 0; i < 100000; ++i)
    deletions.push_back(deletion("/job/rdzv/round_3/node/" + std::to_string(i)));
  Response real;
  real.status = Status::kEvent;
  real.items = compact_deletions(deletions);
  std::string plain_frame;
  Response plain;
  plain.status = Status::kEvent;
  plain.items = deletions;
  encode_response(plain, plain_frame);
  frame.clear();
  encode_response(real, frame);
  const auto decoded = decode_response(body_of(frame), Limits{});
  std::uint64_t keys = 0;
  for (const auto& item : decoded.items) keys += deletions_in(item);
  CHECK(keys == 100000);

  // The bound is the plain frame's size: a limit one byte below it refuses the runs.
  std::uint64_t expanded = body_of(frame).size();
  for (const auto& item : real.items) expanded += plain_deletion_bytes(item);
  CHECK(expanded >= body_of(plain_frame).size());
  Limits tight;
  tight.max_frame_bytes = static_cast<std::uint32_t>(expanded);
  CHECK_NOTHROW(decode_response(body_of(frame), tight));
  tight.max_frame_bytes = static_cast<std::uint32_t>(expanded - 1);
  CHECK_THROWS_AS(decode_response(body_of(frame), tight), ddp::ProtocolError);
}

TEST_CASE("plain_deletion_bytes counts each key's header, stem and digits") {
  Item item;
  item.kind = ItemKind::kDeleteRuns;
  item.key = "n/";
  item.value = "8-11,100";
  // 8, 9 (1 digit), 10, 11 (2), 100 (3): 5 keys x (17 + 2) + 1 + 1 + 2 + 2 + 3.
  CHECK(plain_deletion_bytes(item) == 5 * 19 + 9);
  item.value = "999999999999999999";
  CHECK(plain_deletion_bytes(item) == 19 + 18);
  CHECK(plain_deletion_bytes(deletion("n/1")) == 0);
}
