#include <string>

#include "ddp/common/deadline.hpp"
#include "ddp/common/error.hpp"
#include "work_state.hpp"

namespace ddp {

void Work::State::complete(std::exception_ptr err) {
  {
    std::lock_guard lock(mu);
    if (done) return;
    done = true;
    error = std::move(err);
  }
  cv.notify_all();
}

Work::Work() : state_(std::make_shared<State>()) { state_->done = true; }

Work::Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

void Work::wait(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(state_->mu);
  // A timeout past the clock's range (kForever among them) is no timeout.
  if (!wait_within(state_->cv, lock, Deadline::after(timeout), [&] { return state_->done; })) {
    throw TimeoutError(std::string("Work::wait: ") + state_->op + " on rank " + std::to_string(state_->rank) +
                       " did not complete within " + std::to_string(timeout.count()) +
                       " ms (the operation keeps running)");
  }
  if (!state_->error) return;
  if (state_->map_error) {
    // Mapping may read the store for a while: not under the lock.
    auto map = std::move(state_->map_error);
    auto error = state_->error;
    lock.unlock();
    error = (*map)(error);
    lock.lock();
    state_->error = error;
  }
  std::rethrow_exception(state_->error);
}

bool Work::is_completed() const {
  std::lock_guard lock(state_->mu);
  return state_->done;
}

std::exception_ptr Work::exception() const {
  std::lock_guard lock(state_->mu);
  return state_->error;
}

}  // namespace ddp
