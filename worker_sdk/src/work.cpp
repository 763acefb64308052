#include <string>

#include "ddp/common/deadline.hpp"
#include "ddp/common/error.hpp"
#include "liveness_collectives.hpp"
#include "work_state.hpp"

namespace ddp {

void Work::State::complete(std::exception_ptr err) {
  std::uint64_t seq = 0;
  {
    std::lock_guard lock(mu);
    if (done) return;
    done = true;
    error = std::move(err);
    seq = liveness_seq;
  }
  cv.notify_all();
  detail::collective_completed(seq);
}

Work detail::WorkAccess::track(Work work, std::uint64_t seq) {
  if (seq == 0) return work;
  bool done = false;
  {
    std::lock_guard lock(work.state_->mu);
    done = work.state_->done;
    if (!done) work.state_->liveness_seq = seq;
  }
  if (done) collective_completed(seq);
  return work;
}

Work::Work() : state_(std::make_shared<State>()) { state_->done = true; }

Work::Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

void Work::wait(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(state_->mu);
  // A timeout past the clock's range (kForever among them) is no timeout.
  const Deadline deadline = Deadline::after(timeout);
  const auto hooks = state_->hooks;
  const auto done = [&] { return state_->done; };
  for (;;) {
    const bool polling = hooks && hooks->abandon;
    const Deadline slice = polling ? Deadline::after(hooks->poll) : deadline;
    const Deadline until = slice.at() < deadline.at() ? slice : deadline;
    if (wait_within(state_->cv, lock, until, done)) break;
    if (deadline.expired()) {
      throw TimeoutError(std::string("Work::wait: ") + state_->op + " on rank " +
                         std::to_string(state_->rank) + " did not complete within " +
                         std::to_string(timeout.count()) + " ms (the operation keeps running)");
    }
    // The store is read without the lock.
    lock.unlock();
    std::exception_ptr instead = hooks->abandon();
    lock.lock();
    if (instead && !state_->done) std::rethrow_exception(instead);
  }
  if (!state_->error) return;
  if (hooks && hooks->map_error && !state_->mapped) {
    // Mapping may read the store for a while: not under the lock.
    auto error = state_->error;
    lock.unlock();
    error = hooks->map_error(error);
    lock.lock();
    state_->error = error;
    state_->mapped = true;
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
