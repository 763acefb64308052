#include "ddp/common/json_input.hpp"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "test_support.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using ddp::JsonError;
using ddp::JsonLimits;
using ddp::parse_json;
using ddp::read_json_file;

namespace {

constexpr JsonLimits kSmall{1000, 4};

std::string nested_arrays(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

JsonError refusal(std::string_view text, const JsonLimits& limits) {
  try {
    parse_json(text, limits);
  } catch (const JsonError& e) {
    return e;
  }
  FAIL("parse_json accepted what it should refuse");
  return JsonError(JsonError::Kind::kMalformed, "accepted");
}

}  // namespace

TEST_CASE("outside JSON: a document within the bounds parses as nlohmann parses it") {
  const std::string text =
      R"({"message": {"message": "boom", "extraInfo": {"timestamp": "1"}}, "n": [1, 2.5]})";
  CHECK(parse_json(text, ddp::json_input::kErrorFile) == nlohmann::json::parse(text));
  CHECK(parse_json(nested_arrays(4), kSmall).dump() == nested_arrays(4));
  CHECK(parse_json("7", kSmall) == 7);
}

TEST_CASE("outside JSON: nesting past the bound is refused, saying how deep it was") {
  const auto e = refusal(nested_arrays(5), kSmall);
  CHECK(e.kind() == JsonError::Kind::kTooDeep);
  CHECK_THAT(e.what(), Equals("nests 5 levels deep; at most 4 are read"));
  // Objects count the same as arrays.
  CHECK_THAT(refusal(R"({"a":{"a":{"a":{"a":{"a":1}}}}})", kSmall).what(), Contains("nests 5 levels"));
}

TEST_CASE("outside JSON: a 100000-deep document is one error, not a stack overflow") {
  const auto text = R"({"message": )" + nested_arrays(100000) + "}";
  const auto e = refusal(text, ddp::json_input::kErrorFile);
  CHECK(e.kind() == JsonError::Kind::kTooDeep);
  CHECK_THAT(e.what(), Equals("nests 100001 levels deep; at most 64 are read"));
  // Cut short, it is still reported by its depth, the thing to fix.
  CHECK(refusal(std::string(300000, '['), ddp::json_input::kErrorFile).kind() == JsonError::Kind::kTooDeep);
}

TEST_CASE("outside JSON: at the depth bound, dump, copy and compare of the value work") {
  const auto text = nested_arrays(ddp::json_input::kMaxDepth);
  const auto j = parse_json(text, ddp::json_input::kStatusRecord);
  const nlohmann::json copy = j;
  CHECK(copy == j);
  CHECK(copy.dump() == text);
}

TEST_CASE("outside JSON: text past the size bound is refused before it is parsed") {
  const auto e = refusal(std::string(1001, ' '), kSmall);
  CHECK(e.kind() == JsonError::Kind::kTooLarge);
  CHECK_THAT(e.what(), Equals("is 1001 bytes; at most 1000 are read"));
}

TEST_CASE("outside JSON: malformed text names where the syntax error is") {
  const auto e = refusal(R"({"a": tru})", kSmall);
  CHECK(e.kind() == JsonError::Kind::kMalformed);
  CHECK(e.byte() == 10);
  CHECK_THAT(e.what(), Contains("is not valid JSON: parse error at line 1, column 10: syntax error"));
  CHECK_THAT(e.detail(), Contains("syntax error while parsing value"));
  CHECK(refusal("", kSmall).kind() == JsonError::Kind::kMalformed);
  // nlohmann alone would stop at the NUL and accept {}.
  const auto nul = refusal(std::string("{}\0{\"more\": 1}", 14), kSmall);
  CHECK(nul.kind() == JsonError::Kind::kMalformed);
  CHECK_THAT(nul.what(), Equals("is not valid JSON: a NUL byte at byte 3"));
  CHECK(nul.byte() == 3);
  CHECK(refusal("{} {}", kSmall).kind() == JsonError::Kind::kMalformed);
}

TEST_CASE("outside JSON: try_parse_json refuses with a discarded value and says why") {
  std::string why;
  CHECK(ddp::try_parse_json(nested_arrays(5), kSmall, &why).is_discarded());
  CHECK(why == "nests 5 levels deep; at most 4 are read");
  CHECK(ddp::try_parse_json("{", kSmall).is_discarded());
  CHECK(ddp::try_parse_json(R"({"pid": 7})", kSmall)["pid"] == 7);
}

TEST_CASE("outside JSON files: missing, too large, or not a regular file") {
  ddp::test::TempDir dir;
  CHECK_FALSE(read_json_file(dir / "missing.json", 100, true));

  ddp::test::write_file(dir / "small.json", R"({"a": 1})");
  CHECK(read_json_file(dir / "small.json", 100, true) == R"({"a": 1})");

  ddp::test::write_file(dir / "big.json", std::string(101, ' '));
  try {
    read_json_file(dir / "big.json", 100, true);
    FAIL("a file past the bound was read");
  } catch (const JsonError& e) {
    CHECK(e.kind() == JsonError::Kind::kTooLarge);
    CHECK_THAT(e.what(), Equals("is 101 bytes; at most 100 are read"));
  }

  // A FIFO nobody writes to: refused at once instead of waiting for a writer.
  REQUIRE(::mkfifo((dir / "fifo.json").c_str(), 0600) == 0);
  CHECK_THROWS_WITH(read_json_file(dir / "fifo.json", 100, true),
                    Equals("cannot be read: it is a FIFO, not a regular file"));
  CHECK_THROWS_WITH(read_json_file(dir.path(), 100, true), Contains("it is a directory"));
  // Without regular_only a character device is read, up to the bound.
  CHECK_THROWS_WITH(read_json_file("/dev/zero", 100, false),
                    Equals("holds more than 100 bytes; at most 100 are read"));
}
