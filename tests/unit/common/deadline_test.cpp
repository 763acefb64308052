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

TEST_CASE("a deadline past the clock's range is never, not one in the past") {
  CHECK_FALSE(ddp::Deadline::after(ddp::Millis::max()).expired());
  CHECK(ddp::Deadline::after(ddp::Millis::max()).is_never());
  CHECK_FALSE(
      ddp::Deadline::after(std::chrono::duration_cast<ddp::Millis>(std::chrono::hours(24 * 365 * 300)))
          .expired());
  CHECK(ddp::Deadline::after(ddp::Millis::min()).expired());
}
