// The shared completion state behind ddp::Work.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

#include "ddp/work.hpp"

namespace ddp {

struct Work::State {
  // Turns a failure into the error wait() throws (ElasticGroup: a lost peer
  // becomes ddp::MembershipChanged). Runs on the waiting thread, once.
  using ErrorMap = std::function<std::exception_ptr(std::exception_ptr)>;

  // Completes the operation; only the first call counts.
  void complete(std::exception_ptr error = nullptr);

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  const char* op = "collective";  // for "wait timed out" messages
  int rank = 0;
  std::shared_ptr<const ErrorMap> map_error;  // null: errors as they are
};

}  // namespace ddp
