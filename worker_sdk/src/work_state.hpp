// The shared completion state behind ddp::Work.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

#include "ddp/work.hpp"

namespace ddp {

namespace detail {
// What an ElasticGroup adds to every Work of its group; both run on the
// waiting thread.
struct WorkHooks {
  // Turns a failure into the error wait() throws (a lost peer becomes
  // ddp::MembershipChanged). Runs once per Work.
  std::function<std::exception_ptr(std::exception_ptr)> map_error;
  // Asked every `poll` while wait() blocks: an error to throw at once instead
  // of waiting further (the generation moved on, so the operation can only
  // end by failing), or null to keep waiting.
  std::function<std::exception_ptr()> abandon;
  std::chrono::milliseconds poll{500};
};
}  // namespace detail

struct Work::State {
  // Completes the operation; only the first call counts.
  void complete(std::exception_ptr error = nullptr);

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  const char* op = "collective";  // for "wait timed out" messages
  int rank = 0;
  std::shared_ptr<const detail::WorkHooks> hooks;  // null: a plain group
  bool mapped = false;                             // hooks->map_error ran on `error`
  // Its number in the worker's liveness file (liveness_collectives.hpp); 0: not counted.
  std::uint64_t liveness_seq = 0;
};

namespace detail {
struct WorkAccess {
  // Reports `seq` completed in the liveness file when `work` completes (now,
  // if it already has). Returns `work`.
  static Work track(Work work, std::uint64_t seq);
};
}  // namespace detail

}  // namespace ddp
