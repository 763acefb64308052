// The fake clock of the server's unit tests: the tables take the time as an
// argument, so a test moves it by hand from t0 and nothing sleeps.
#pragma once

#include <chrono>

#include "ddp/common/deadline.hpp"

namespace ddp::test {

// An hour past the clock's epoch, so that t0 minus a ttl or a backoff is still
// a valid time point.
inline const Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);

}  // namespace ddp::test
