// Runs blocking calls (rendezvous, store) one at a time on a dedicated thread
// so the agent's io thread keeps reacting to signals and worker exits.
//
// Thread-safety: call() from any thread; calls run in order on the caller's
// own thread. If a call is still blocked at destruction the thread is
// detached (its state is shared, so it stays valid); the owner must then end
// the process promptly (AgentResult::abandon_process).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace ddp::agent {

class BlockingCaller {
 public:
  BlockingCaller() : state_(std::make_shared<State>()) {
    thread_ = std::thread([st = state_] { loop(*st); });
  }
  ~BlockingCaller() {
    bool busy = false;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->stopping = true;
      state_->jobs.clear();
      busy = state_->busy;
    }
    state_->cv.notify_all();
    if (busy) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }
  BlockingCaller(const BlockingCaller&) = delete;
  BlockingCaller& operator=(const BlockingCaller&) = delete;

  void call(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->jobs.push_back(std::move(fn));
    }
    state_->cv.notify_one();
  }

  // True while a call runs or waits to run.
  bool busy() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->busy || !state_->jobs.empty();
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> jobs;
    bool stopping = false;
    bool busy = false;
  };

  static void loop(State& st) {
    std::unique_lock<std::mutex> lock(st.mu);
    while (true) {
      st.cv.wait(lock, [&] { return st.stopping || !st.jobs.empty(); });
      if (st.stopping) return;
      auto fn = std::move(st.jobs.front());
      st.jobs.pop_front();
      st.busy = true;
      lock.unlock();
      fn();
      fn = nullptr;
      lock.lock();
      st.busy = false;
    }
  }

  std::shared_ptr<State> state_;
  std::thread thread_;
};

// Lets a BlockingCaller's thread post results to the io_context only while
// it exists: its owner close()s it before the io_context goes.
class IoSink {
 public:
  explicit IoSink(boost::asio::io_context& io) : io_(&io) {}
  void post(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    if (io_ != nullptr) boost::asio::post(*io_, std::move(fn));
  }
  void close() {
    std::lock_guard<std::mutex> lock(mu_);
    io_ = nullptr;
  }

 private:
  std::mutex mu_;
  boost::asio::io_context* io_;
};

}  // namespace ddp::agent
