// The replies queued for clients that have not read them yet, all
// connections together, against one budget. Each connection already has a
// cap of its own (SessionOptions::max_queued_bytes, one largest reply plus
// slack); without this one, N clients that send a watch and never read could
// hold N times that (10 watchers: +1.04 GB). Past the budget the connection
// holding the most unread bytes is dropped first, again until the total is
// back within it: a flood of lazy watchers costs the lazy watchers, while a
// client that reads its replies holds next to nothing here.
//
// A dropped connection's queue is freed at once and its close is posted, so
// that no other connection's close runs inside the send that went over.
//
// Thread-safety: loop thread only. A session charges here before it is
// destroyed and releases what it held when it closes.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <set>
#include <utility>

namespace ddp::store::server {

class Session;

class ReplyBudget {
 public:
  // 0: no budget (each connection's own cap still holds).
  explicit ReplyBudget(std::size_t max_bytes) : max_bytes_(max_bytes) {}

  // `s` held `before` bytes for replies not yet written and now holds `after`
  // (the capacity of its non-empty reply buffers: what the replies cost in
  // memory). While all sessions together hold more than the budget, the
  // largest holders are dropped, perhaps `s` itself.
  void charge(Session& s, std::size_t before, std::size_t after);

  std::size_t bytes() const { return bytes_; }
  std::size_t max_bytes() const { return max_bytes_; }
  std::uint64_t dropped() const { return dropped_; }
  // True while the sessions hold half the budget or more: a watch replaying
  // history then sends no more while its client has replies still unread
  // (Dispatcher::pump_replay), so that replays alone never make anyone drop.
  bool pressed() const { return max_bytes_ > 0 && bytes_ * 2 >= max_bytes_; }

 private:
  // Sessions holding this much or more are kept by size, so that the largest
  // is found at once; a smaller holder is only counted (a reply or two in a
  // socket buffer's worth, the usual case, costs an addition).
  static constexpr std::size_t kTrackedBytes = 64 * 1024;

  void drop(Session& victim, std::size_t held);

  std::size_t max_bytes_;
  std::size_t bytes_ = 0;
  std::uint64_t dropped_ = 0;
  std::uint64_t unlogged_ = 0;
  std::chrono::steady_clock::time_point last_log_{};
  std::set<std::pair<std::size_t, Session*>> large_;
};

}  // namespace ddp::store::server
