#include "ddp/common/deadline.hpp"

#include <algorithm>

namespace ddp {

Millis Deadline::remaining() const {
  if (is_never()) return Millis::max();
  const auto now = Clock::now();
  // Compared first: at_ - now would overflow for a point near the clock's start.
  if (at_ <= now) return Millis(0);
  return std::chrono::duration_cast<Millis>(at_ - now);
}

Backoff::Backoff(Millis base, Millis cap)
    : base_(base), cap_(cap), rng_(static_cast<unsigned>(Clock::now().time_since_epoch().count())) {}

Millis Backoff::next() {
  // Cap the exponent so the shift cannot overflow.
  const int shift = std::min(attempt_, 20);
  ++attempt_;
  const auto ceiling = std::min<long long>(cap_.count(), base_.count() << shift);
  std::uniform_int_distribution<long long> dist(0, std::max<long long>(ceiling, 1));
  return Millis(dist(rng_));
}

}  // namespace ddp
