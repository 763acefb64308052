#include "op_queue.hpp"

#include "ddp/common/error.hpp"
#include "work_state.hpp"

namespace ddp::detail {

OpQueue::OpQueue(int rank, std::shared_ptr<const WorkHooks> hooks)
    : rank_(rank), hooks_(std::move(hooks)), thread_([this] { loop(); }) {}

OpQueue::~OpQueue() {
  std::deque<Task> abandoned;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    abandoned.swap(tasks_);
  }
  cv_.notify_all();
  for (auto& task : abandoned) {
    task.state->complete(std::make_exception_ptr(
        BackendError(std::string(task.state->op) + " on rank " + std::to_string(rank_) +
                     " was cancelled: its process group was destroyed before it started")));
  }
  thread_.join();
}

namespace {
std::exception_ptr poisoned_error(const char* op, int rank, const std::string& first) {
  return std::make_exception_ptr(
      BackendError(std::string(op) + " on rank " + std::to_string(rank) +
                   ": the process group is unusable after an earlier failure: " + first));
}
}  // namespace

Work OpQueue::submit(const char* op, std::function<void()> fn, bool inline_if_idle) {
  auto state = std::make_shared<Work::State>();
  state->op = op;
  state->rank = rank_;
  state->hooks = hooks_;
  {
    std::unique_lock lock(mu_);
    if (!poisoned_.empty()) {
      state->done = true;
      state->error = poisoned_error(op, rank_, poisoned_);
      return Work(state);
    }
    // Not in a group whose waits poll for being abandoned (an ElasticGroup's):
    // an operation on the caller's thread cannot be left behind when Gloo
    // misses its peer's close, and would hold the caller until its timeout.
    const bool abandonable = hooks_ && hooks_->abandon;
    if (inline_if_idle && !abandonable && !busy_ && tasks_.empty()) {
      busy_ = true;
      lock.unlock();
      Task task{std::move(fn), state};
      execute(task);
      lock.lock();
      busy_ = false;
      // Wake the queue thread only if work arrived meanwhile: an unneeded
      // wake-up per blocking collective is measurable on small messages.
      const bool wake = !tasks_.empty() || stopping_;
      lock.unlock();
      if (wake) cv_.notify_all();
      return Work(state);
    }
    tasks_.push_back(Task{std::move(fn), state});
  }
  cv_.notify_all();
  return Work(state);
}

bool OpQueue::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return !busy_ && tasks_.empty(); });
}

void OpQueue::execute(Task& task) {
  try {
    task.fn();
    task.state->complete();
  } catch (const std::exception& e) {
    {
      std::lock_guard lock(mu_);
      if (poisoned_.empty()) poisoned_ = e.what();
    }
    task.state->complete(std::current_exception());
  }
}

void OpQueue::loop() {
  for (;;) {
    Task task;
    std::string poisoned;
    {
      std::unique_lock lock(mu_);
      // Never start while an inline operation runs: one collective at a time, in order.
      cv_.wait(lock, [&] { return (stopping_ && !busy_) || (!tasks_.empty() && !busy_); });
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
      poisoned = poisoned_;
      busy_ = true;
    }
    // Operations queued behind a failure would only wait out their own timeouts.
    if (!poisoned.empty()) {
      task.state->complete(poisoned_error(task.state->op, rank_, poisoned));
    } else {
      execute(task);
    }
    {
      std::lock_guard lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();
  }
}

}  // namespace ddp::detail
