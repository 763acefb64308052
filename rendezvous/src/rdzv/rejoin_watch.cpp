#include "rejoin_watch.hpp"

#include "ddp/common/logging.hpp"

namespace ddp::rdzv::detail {

RejoinWatch::RejoinWatch(const PreviousRound& prev, std::set<std::int64_t> gone)
    : prev_(prev), gone_(std::move(gone)) {
  thread_ = std::thread([this] { loop(); });
}

RejoinWatch::~RejoinWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void RejoinWatch::departed(std::int64_t rank) {
  if (rank < 0 || rank >= prev_.members) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!gone_.insert(rank).second) return;
    pending_ = true;
  }
  cv_.notify_all();
}

void RejoinWatch::arm(std::function<void(int live)> on_departure) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    on_departure_ = std::move(on_departure);
  }
  cv_.notify_all();
}

int RejoinWatch::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return prev_.members - static_cast<int>(gone_.size());
}

void RejoinWatch::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || (pending_ && on_departure_); });
    if (stop_) return;
    pending_ = false;
    auto cb = on_departure_;
    const int live = prev_.members - static_cast<int>(gone_.size());
    lock.unlock();
    try {
      cb(live);
    } catch (const std::exception& e) {
      // The joining thread's own wait sees a broken store.
      log::get("rdzv")->debug("re-checking the round after a departure failed: {}", e.what());
    }
    lock.lock();
  }
}

}  // namespace ddp::rdzv::detail
