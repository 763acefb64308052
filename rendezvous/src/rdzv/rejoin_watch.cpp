#include "rejoin_watch.hpp"

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "keys.hpp"

namespace ddp::rdzv::detail {

RejoinWatch::RejoinWatch(std::shared_ptr<store::Store> store, std::string prefix, const PreviousRound& prev,
                         std::function<void(int live)> on_departure)
    : prefix_(std::move(prefix) + "node/"), members_(prev.members), on_departure_(std::move(on_departure)) {
  thread_ = std::thread([this] { loop(); });
  auto on_event = [this](const store::WatchEvent& ev) {
    if (ev.type != store::EventType::kDelete || ev.key.compare(0, prefix_.size(), prefix_) != 0) return;
    const auto rank = parse_int(std::string_view(ev.key).substr(prefix_.size()));
    if (rank < 0 || rank >= members_) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!gone_.insert(rank).second) return;
      ++pending_;
    }
    cv_.notify_all();
  };
  // A watch that ends (store lost, history compacted) only costs the early
  // close: the round still closes at the last call.
  auto on_error = [](const std::string& why) { log::get("rdzv")->debug("rejoin watch ended: {}", why); };
  try {
    watch_ = store->watch(prefix_, prev.node_from, on_event, on_error);
  } catch (const Error& e) {
    log::get("rdzv")->debug("cannot watch {} for departures: {}", prefix_, e.what());
  }
}

RejoinWatch::~RejoinWatch() {
  if (watch_) watch_->cancel();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int RejoinWatch::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return members_ - static_cast<int>(gone_.size());
}

void RejoinWatch::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || pending_ > 0; });
    if (stop_) return;
    pending_ = 0;
    const int live = members_ - static_cast<int>(gone_.size());
    lock.unlock();
    try {
      on_departure_(live);
    } catch (const std::exception& e) {
      // The main thread's wait sees a broken store on its own.
      log::get("rdzv")->debug("re-checking the round after a departure failed: {}", e.what());
    }
    lock.lock();
  }
}

}  // namespace ddp::rdzv::detail
