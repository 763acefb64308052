#include "ddp/common/deadline.hpp"

#include <catch2/catch.hpp>

using namespace std::chrono_literals;

TEST_CASE("deadline never expires when never") {
  auto d = ddp::Deadline::never();
  CHECK_FALSE(d.expired());
  CHECK(d.remaining() == ddp::Millis::max());
}

TEST_CASE("deadline in the past is expired with zero remaining") {
  auto d = ddp::Deadline::after(-5ms);
  CHECK(d.expired());
  CHECK(d.remaining() == 0ms);
}

TEST_CASE("backoff delays stay under the growing ceiling and the cap") {
  ddp::Backoff b(10ms, 200ms);
  for (int i = 0; i < 50; ++i) {
    auto ceiling = std::min<long long>(200, 10LL << std::min(i, 20));
    auto d = b.next();
    CHECK(d.count() >= 0);
    CHECK(d.count() <= ceiling);
  }
  CHECK(b.attempts() == 50);
}
