// Saturating time arithmetic (ddp/common/time_bounds.hpp): what the numbers
// from flags, env variables and workers' requests become at the edges of
// std::chrono's range.
#include "ddp/common/time_bounds.hpp"

#include <catch2/catch.hpp>
#include <limits>

using namespace std::chrono_literals;
using ddp::kMaxDuration;
using ddp::TimeUnit;
using Steady = std::chrono::steady_clock;

TEST_CASE("integer sums and products stop at the type's ends") {
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  constexpr auto kMin = std::numeric_limits<std::int64_t>::min();
  CHECK(ddp::saturating_add<std::int64_t>(kMax - 1, 5) == kMax);
  CHECK(ddp::saturating_add<std::int64_t>(kMin + 1, -5) == kMin);
  CHECK(ddp::saturating_add<std::int64_t>(40, 2) == 42);
  CHECK(ddp::saturating_add<std::uint64_t>(UINT64_MAX - 3, 10) == UINT64_MAX);
  CHECK(ddp::saturating_mul<std::int64_t>(kMax / 2, 3) == kMax);
  CHECK(ddp::saturating_mul<std::int64_t>(kMax / 2, -3) == kMin);
  CHECK(ddp::saturating_mul<std::int64_t>(-6, 7) == -42);
}

TEST_CASE("a conversion to a finer unit saturates instead of wrapping") {
  using std::chrono::nanoseconds;
  CHECK(ddp::saturating_cast<nanoseconds>(std::chrono::milliseconds::max()) == nanoseconds::max());
  CHECK(ddp::saturating_cast<nanoseconds>(std::chrono::milliseconds::min()) == nanoseconds::min());
  CHECK(ddp::saturating_cast<nanoseconds>(std::chrono::hours(24 * 365 * 300)) == nanoseconds::max());
  CHECK(ddp::saturating_cast<nanoseconds>(1500ms) == nanoseconds(1'500'000'000));
  CHECK(ddp::saturating_cast<std::chrono::milliseconds>(nanoseconds(1'999'999)) == 1ms);  // truncates
  // From double seconds: the largest double, infinity, NaN.
  using Secs = std::chrono::duration<double>;
  CHECK(ddp::saturating_cast<nanoseconds>(Secs(1e12)) == nanoseconds::max());
  CHECK(ddp::saturating_cast<nanoseconds>(Secs(std::numeric_limits<double>::max())) == nanoseconds::max());
  CHECK(ddp::saturating_cast<nanoseconds>(Secs(-std::numeric_limits<double>::infinity())) ==
        nanoseconds::min());
  CHECK(ddp::saturating_cast<nanoseconds>(Secs(std::numeric_limits<double>::quiet_NaN())) ==
        nanoseconds::zero());
  CHECK(ddp::saturating_cast<std::chrono::milliseconds>(Secs(2.5)) == 2500ms);
}

TEST_CASE("now plus a huge duration is the clock's end, not a time in the past") {
  const auto now = Steady::now();
  CHECK(ddp::saturating_add(now, std::chrono::milliseconds::max()) == Steady::time_point::max());
  CHECK(ddp::saturating_add(now, std::chrono::duration<double>(1e12)) == Steady::time_point::max());
  CHECK(ddp::saturating_add(now, std::chrono::milliseconds::min()) < now);
  CHECK(ddp::saturating_add(Steady::time_point::min(), -1ms) == Steady::time_point::min());
  CHECK(ddp::saturating_add(now, 5s) == now + 5s);
  CHECK(ddp::saturating_add(Steady::time_point::max(), 1ms) == Steady::time_point::max());
  // kMaxDuration is always safe to add: its reason to be.
  CHECK(ddp::saturating_add(now, kMaxDuration) == now + kMaxDuration);
  const auto sys = std::chrono::system_clock::now();
  CHECK(ddp::saturating_add(sys, std::chrono::seconds::max()) ==
        std::chrono::system_clock::time_point::max());
}

TEST_CASE("clamped durations stay within 0 and kMaxDuration") {
  CHECK(ddp::clamp_duration(std::chrono::hours::max()) == kMaxDuration);
  CHECK(ddp::clamp_duration(-5s) == 0ms);
  CHECK(ddp::clamp_duration(std::chrono::nanoseconds(2'500'000)) == 2ms);
  CHECK(ddp::clamp_product(5s, 3) == 15s);
  CHECK(ddp::clamp_product(std::chrono::milliseconds(1'000'000'000'000), 2'000'000'000) == kMaxDuration);
  CHECK(ddp::clamp_product(5s, -1) == 0ms);
  CHECK(ddp::clamp_duration(1e12, TimeUnit::kSeconds) == kMaxDuration);
  CHECK(ddp::clamp_duration(std::numeric_limits<double>::infinity(), TimeUnit::kSeconds) == kMaxDuration);
  CHECK(ddp::clamp_duration(std::numeric_limits<double>::quiet_NaN(), TimeUnit::kSeconds) == 0ms);
  CHECK(ddp::clamp_duration(-1e300, TimeUnit::kSeconds) == 0ms);
  CHECK(ddp::clamp_duration(2.0004, TimeUnit::kSeconds) == 2000ms);
  CHECK(ddp::clamp_duration(0.1, TimeUnit::kMilliseconds) == 1ms);  // above zero is never "no time"
}

TEST_CASE("to_duration refuses what clamp_duration would have to change") {
  CHECK(ddp::to_duration(30, TimeUnit::kSeconds) == 30s);
  CHECK(ddp::to_duration(0, TimeUnit::kSeconds) == 0ms);
  CHECK(ddp::to_duration(1099511627.776, TimeUnit::kSeconds) == kMaxDuration);
  CHECK_FALSE(ddp::to_duration(1099511627.777, TimeUnit::kSeconds).has_value());
  CHECK_FALSE(ddp::to_duration(-1, TimeUnit::kSeconds).has_value());
  CHECK_FALSE(ddp::to_duration(std::numeric_limits<double>::infinity(), TimeUnit::kMilliseconds).has_value());
  CHECK_FALSE(
      ddp::to_duration(std::numeric_limits<double>::quiet_NaN(), TimeUnit::kMilliseconds).has_value());
}
