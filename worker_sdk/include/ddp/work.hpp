// Handle of an asynchronous collective.
#pragma once

#include <chrono>
#include <exception>
#include <memory>

namespace ddp {

namespace detail {
struct WorkAccess;
}

// Returned by every *_async call of ProcessGroup. Copyable; all copies refer to
// the same operation. The buffers passed to the call must stay alive and
// untouched until the operation completes.
//
// Thread-safety: any member may be called from any thread.
class Work {
 public:
  static constexpr std::chrono::milliseconds kForever = std::chrono::milliseconds::max();

  // An already completed, successful operation.
  Work();

  // Blocks until the operation completes, then rethrows its error if it failed
  // (ddp::TimeoutError when the collective's own timeout passed, ddp::BackendError
  // otherwise). Throws ddp::TimeoutError if `timeout` passes first; the operation
  // itself keeps running and is bounded by its per-operation timeout.
  void wait(std::chrono::milliseconds timeout = kForever) const;
  bool is_completed() const;
  // The operation's error once it has failed; null while running or on success.
  std::exception_ptr exception() const;

  struct State;  // backend side, see src/work_state.hpp
  explicit Work(std::shared_ptr<State> state);

 private:
  friend struct detail::WorkAccess;
  std::shared_ptr<State> state_;
};

}  // namespace ddp
