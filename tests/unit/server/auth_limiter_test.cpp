#include "auth_limiter.hpp"

#include <catch2/catch.hpp>

#include "fake_clock.hpp"

using namespace ddp::store::server;
using ddp::test::t0;
using namespace ddp;

TEST_CASE("auth limiter: the first failures are free, then the wait doubles up to the maximum") {
  AuthLimiter lim(AuthBackoff{3, Millis(100), Millis(1000), Millis(60000)});
  const std::string a = "10.0.0.1";
  for (int i = 0; i < 3; ++i) {
    CHECK(lim.wait_for(a, t0) == Millis(0));
    lim.record_failure(a, t0);
  }
  CHECK(lim.wait_for(a, t0) == Millis(0));
  lim.record_failure(a, t0);  // 4th: 100 ms
  CHECK(lim.wait_for(a, t0) == Millis(100));
  CHECK(lim.wait_for(a, t0 + Millis(60)) == Millis(40));
  CHECK(lim.wait_for(a, t0 + Millis(100)) == Millis(0));
  lim.record_failure(a, t0 + Millis(100));  // 5th: 200 ms
  CHECK(lim.wait_for(a, t0 + Millis(100)) == Millis(200));
  auto now = t0 + Millis(300);
  for (int i = 0; i < 40; ++i) lim.record_failure(a, now);  // saturates, no overflow
  CHECK(lim.wait_for(a, now) == Millis(1000));
  // Other addresses are not affected.
  CHECK(lim.wait_for("10.0.0.2", now) == Millis(0));
}

TEST_CASE("auth limiter: an address is forgotten a while after its last failure") {
  AuthLimiter lim(AuthBackoff{0, Millis(100), Millis(1000), Millis(5000)});
  lim.record_failure("a", t0);
  lim.record_failure("a", t0);
  CHECK(lim.wait_for("a", t0) == Millis(200));
  lim.record_failure("a", t0 + Millis(6000));  // counts from one again
  CHECK(lim.wait_for("a", t0 + Millis(6000)) == Millis(100));
}

TEST_CASE("auth limiter: the summary counts failures and refusals per period and names the top peer") {
  AuthLimiter lim;
  for (int i = 0; i < 5; ++i) lim.record_failure("x", t0);
  lim.record_delayed("x");
  lim.record_failure("y", t0);
  auto s = lim.take_summary();
  CHECK(s.failed == 6);
  CHECK(s.delayed == 1);
  CHECK(s.peers == 2);
  CHECK(s.top_peer == "x");
  CHECK(s.top_count == 6);
  auto empty = lim.take_summary();
  CHECK(empty.failed + empty.delayed == 0);
}

TEST_CASE("auth limiter: the peer table stays bounded") {
  AuthLimiter lim;
  for (std::size_t i = 0; i < AuthLimiter::kMaxPeers + 50; ++i)
    lim.record_failure(std::string("p").append(std::to_string(i)), t0);
  CHECK(lim.peers() <= AuthLimiter::kMaxPeers);
}
