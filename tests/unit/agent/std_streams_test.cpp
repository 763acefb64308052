#include "ddp/agent/std_streams.hpp"

#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"

using namespace ddp::agent;

TEST_CASE("a single stream value applies to every local rank") {
  const auto spec = parse_std_spec("3", "--tee");
  CHECK(spec.for_rank(0) == Std::kAll);
  CHECK(spec.for_rank(7) == Std::kAll);
  CHECK(spec.any());
  CHECK_FALSE(parse_std_spec("0", "--tee").any());
}

TEST_CASE("a per-rank map applies to the named local ranks only") {
  const auto spec = parse_std_spec("0:1,1:2", "--redirects");
  CHECK(spec.for_rank(0) == Std::kOut);
  CHECK(spec.for_rank(1) == Std::kErr);
  CHECK(spec.for_rank(2) == Std::kNone);
  CHECK(has(Std::kAll, Std::kErr));
  CHECK_FALSE(has(Std::kOut, Std::kErr));
}

TEST_CASE("bad stream values name the flag") {
  for (const char* bad : {"4", "x", "", "0:", "0:1,", ":1", "0:7", "-1:1", "1:2:3"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_std_spec(bad, "--tee"), Catch::StartsWith("--tee: "));
  }
}
