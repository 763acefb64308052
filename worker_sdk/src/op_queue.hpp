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

namespace ddp::detail {

// Thread-safety: submit() may be called from any thread. After an operation
// fails the queue is poisoned: later operations fail at once with BackendError
// quoting the first failure, because the peers' view of the sequence of
// collectives is lost (torch behaves the same after a timeout).
// The destructor fails queued operations that have not started and joins the
// thread once the running one returns (bounded by its own timeout).
class OpQueue {
 public:
  explicit OpQueue(int rank);
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // `op` is a static string naming the collective ("all_reduce").
  Work submit(const char* op, std::function<void()> fn);

 private:
  struct Task {
    std::function<void()> fn;
    std::shared_ptr<Work::State> state;
  };
  void loop();

  int rank_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;
  bool stopping_ = false;
  std::string poisoned_;  // first failure, empty while healthy
  std::thread thread_;
};

}  // namespace ddp::detail
