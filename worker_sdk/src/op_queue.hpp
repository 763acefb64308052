// Runs a group's collectives one at a time, in issue order, on its own thread,
// which is what gives Gloo (whose calls block) asynchronous Work handles.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ddp/work.hpp"
#include "work_state.hpp"

namespace ddp::detail {

// Thread-safety: submit() may be called from any thread. After an operation
// fails the queue is poisoned: later operations fail at once with BackendError
// quoting the first failure, because the peers' view of the sequence of
// collectives is lost (torch behaves the same after a timeout).
// The destructor fails queued operations that have not started and joins the
// thread once the running one returns (bounded by its own timeout).
class OpQueue {
 public:
  // `hooks` (may be null) is handed to every Work (Work::State::hooks).
  explicit OpQueue(int rank, std::shared_ptr<const WorkHooks> hooks = nullptr);
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // `op` is a static string naming the collective ("all_reduce"). With
  // `inline_if_idle`, an operation that would start at once (nothing queued or
  // running) runs on the calling thread instead: the caller is about to wait
  // anyway, and this saves two thread hand-offs per blocking collective.
  // Never when the hooks can abandon a wait (WorkHooks::abandon).
  Work submit(const char* op, std::function<void()> fn, bool inline_if_idle = false);
  // Whether nothing runs or waits within `timeout`.
  bool wait_idle(std::chrono::milliseconds timeout);

 private:
  struct Task {
    std::function<void()> fn;
    std::shared_ptr<Work::State> state;
  };
  void loop();
  // Runs one task, records a failure; called with mu_ not held.
  void execute(Task& task);

  int rank_;
  std::shared_ptr<const WorkHooks> hooks_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;
  bool stopping_ = false;
  bool busy_ = false;     // a task is running (on the queue thread or inline)
  std::string poisoned_;  // first failure, empty while healthy
  std::thread thread_;
};

}  // namespace ddp::detail
