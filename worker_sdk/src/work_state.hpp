// The shared completion state behind ddp::Work.
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>

#include "ddp/work.hpp"

namespace ddp {

struct Work::State {
  // Completes the operation; only the first call counts.
  void complete(std::exception_ptr error = nullptr);

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  const char* op = "collective";  // for "wait timed out" messages
  int rank = 0;
};

}  // namespace ddp
