// Deadlines and retry backoff, shared by the store client, rendezvous and agent.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>

#include "ddp/common/time_bounds.hpp"

namespace ddp {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// A point in time after which an operation gives up. Copyable value type.
class Deadline {
 public:
  // A timeout that reaches past the clock's range (Millis::max()) is never.
  static Deadline after(Millis timeout) { return Deadline(saturating_add(Clock::now(), timeout)); }
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  explicit Deadline(Clock::time_point at) : at_(at) {}

  bool expired() const { return Clock::now() >= at_; }
  bool is_never() const { return at_ == Clock::time_point::max(); }
  // Time left, never negative.
  Millis remaining() const;
  Clock::time_point at() const { return at_; }

 private:
  Clock::time_point at_;
};

// cv.wait_until(lock, d.at(), pred), or cv.wait(lock, pred) for a deadline
// that never comes. Unlike cv.wait_for(lock, timeout, pred), which adds the
// timeout to now unchecked (a caller's milliseconds::max() times out at once).
// Returns pred().
template <class CondVar, class Lock, class Pred>
bool wait_within(CondVar& cv, Lock& lock, const Deadline& d, Pred pred) {
  if (!d.is_never()) return cv.wait_until(lock, d.at(), pred);
  cv.wait(lock, pred);
  return true;
}

// Exponential backoff with full jitter (AWS architecture blog's "full jitter"):
// the n-th delay is uniform in [0, min(cap, base * 2^n)], so many clients that lost
// the same server do not reconnect in lockstep. Not thread-safe.
class Backoff {
 public:
  Backoff(Millis base, Millis cap);
  Millis next();
  void reset() { attempt_ = 0; }
  int attempts() const { return attempt_; }

 private:
  Millis base_;
  Millis cap_;
  int attempt_ = 0;
  std::minstd_rand rng_;
};

}  // namespace ddp
