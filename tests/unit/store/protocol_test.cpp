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
