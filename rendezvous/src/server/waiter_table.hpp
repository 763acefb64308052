// Blocked gets and waits, indexed by the keys they still need. A waiter is
// released when its last missing key is put, or expires at its deadline; the
// owner (server loop or test) keeps one timer for next_deadline() instead of
// one per waiter, and maps WaiterIds to whatever it must answer.
//
// Thread-safety: none; owned by the server's loop thread.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ddp/common/deadline.hpp"

namespace ddp::store::server {

using WaiterId = std::uint64_t;

class WaiterTable {
 public:
  // `missing` must be non-empty; deadline Clock::time_point::max() means never.
  void add(WaiterId id, const std::vector<std::string>& missing, Clock::time_point deadline);
  // A key was put: returns the waiters (ascending id) that now have every key
  // they needed; they are removed from the table.
  std::vector<WaiterId> on_put(const std::string& key);
  // A value was pushed on the queue `key`: at most one waiter is released, the
  // oldest (lowest id) that needs nothing else. As in torch's server, the
  // waiters passed over on the way count `key` as arrived.
  std::optional<WaiterId> on_push(const std::string& key);
  // Cancel/disconnect. Returns false if unknown (already released or expired).
  bool remove(WaiterId id);
  // Removes and returns the waiters whose deadline is <= now, earliest first.
  std::vector<WaiterId> take_expired(Clock::time_point now);
  std::optional<Clock::time_point> next_deadline() const;
  std::size_t size() const { return waiters_.size(); }

 private:
  struct Waiter {
    std::unordered_set<std::string> missing;
    Clock::time_point deadline;
  };
  void erase(std::unordered_map<WaiterId, Waiter>::iterator it);

  std::unordered_map<WaiterId, Waiter> waiters_;
  std::unordered_map<std::string, std::unordered_set<WaiterId>> by_key_;
  std::set<std::pair<Clock::time_point, WaiterId>> by_deadline_;
};

}  // namespace ddp::store::server
