#include "waiter_table.hpp"

#include <algorithm>

namespace ddp::store::server {

void WaiterTable::add(WaiterId id, const std::vector<std::string>& missing, Clock::time_point deadline) {
  auto& w = waiters_[id];
  w.deadline = deadline;
  for (const auto& k : missing) {
    w.missing.insert(k);
    by_key_[k].insert(id);
  }
  if (deadline != Clock::time_point::max()) by_deadline_.insert({deadline, id});
}

void WaiterTable::erase(std::unordered_map<WaiterId, Waiter>::iterator it) {
  const auto id = it->first;
  for (const auto& k : it->second.missing) {
    auto bk = by_key_.find(k);
    if (bk == by_key_.end()) continue;
    bk->second.erase(id);
    if (bk->second.empty()) by_key_.erase(bk);
  }
  by_deadline_.erase({it->second.deadline, id});
  waiters_.erase(it);
}

std::vector<WaiterId> WaiterTable::on_put(const std::string& key) {
  std::vector<WaiterId> ready;
  auto bk = by_key_.find(key);
  if (bk == by_key_.end()) return ready;
  auto ids = std::move(bk->second);
  by_key_.erase(bk);
  for (auto id : ids) {
    auto it = waiters_.find(id);
    if (it == waiters_.end()) continue;
    it->second.missing.erase(key);
    if (it->second.missing.empty()) {
      ready.push_back(id);
      erase(it);
    }
  }
  std::sort(ready.begin(), ready.end());
  return ready;
}

std::optional<WaiterId> WaiterTable::on_push(const std::string& key) {
  auto bk = by_key_.find(key);
  if (bk == by_key_.end()) return std::nullopt;
  std::vector<WaiterId> ids(bk->second.begin(), bk->second.end());
  std::sort(ids.begin(), ids.end());
  for (auto id : ids) {
    auto it = waiters_.find(id);
    if (it == waiters_.end()) continue;
    it->second.missing.erase(key);
    bk->second.erase(id);
    if (it->second.missing.empty()) {
      if (bk->second.empty()) by_key_.erase(bk);
      erase(it);
      return id;
    }
  }
  if (bk->second.empty()) by_key_.erase(bk);
  return std::nullopt;
}

bool WaiterTable::remove(WaiterId id) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return false;
  erase(it);
  return true;
}

std::vector<WaiterId> WaiterTable::take_expired(Clock::time_point now) {
  std::vector<WaiterId> out;
  while (!by_deadline_.empty() && by_deadline_.begin()->first <= now) {
    const auto id = by_deadline_.begin()->second;
    out.push_back(id);
    remove(id);
  }
  return out;
}

std::optional<Clock::time_point> WaiterTable::next_deadline() const {
  if (by_deadline_.empty()) return std::nullopt;
  return by_deadline_.begin()->first;
}

}  // namespace ddp::store::server
