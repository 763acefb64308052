#include "ddp/common/deadline.hpp"

#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>
#include <thread>

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

TEST_CASE("wait_within waits without a timeout for a deadline that never comes, and times out otherwise") {
  std::mutex mu;
  std::condition_variable cv;
  std::unique_lock<std::mutex> lock(mu);
  bool ready = false;
  CHECK_FALSE(ddp::wait_within(cv, lock, ddp::Deadline::after(5ms), [&] { return ready; }));
  std::thread setter([&] {
    std::lock_guard<std::mutex> l(mu);
    ready = true;
    cv.notify_all();
  });
  // With wait_for(), milliseconds::max() would wrap into the past and return false at once.
  CHECK(ddp::wait_within(cv, lock, ddp::Deadline::after(ddp::Millis::max()), [&] { return ready; }));
  lock.unlock();
  setter.join();
}
