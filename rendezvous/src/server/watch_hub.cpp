#include "watch_hub.hpp"

#include <string_view>

namespace ddp::store::server {

void WatchHub::add(WatchId id, std::string prefix) {
  remove(id);
  by_prefix_[prefix].insert(id);
  prefix_of_.emplace(id, std::move(prefix));
}

bool WatchHub::remove(WatchId id) {
  auto it = prefix_of_.find(id);
  if (it == prefix_of_.end()) return false;
  auto bp = by_prefix_.find(it->second);
  if (bp != by_prefix_.end()) {
    bp->second.erase(id);
    if (bp->second.empty()) by_prefix_.erase(bp);
  }
  prefix_of_.erase(it);
  return true;
}

std::vector<std::pair<WatchId, std::vector<WatchEvent>>> WatchHub::route(
    const std::vector<WatchEvent>& events) const {
  std::map<WatchId, std::vector<WatchEvent>> per_watch;
  for (const auto& e : events) {
    const std::string_view key(e.key);
    if (by_prefix_.size() <= key.size()) {
      for (const auto& [prefix, ids] : by_prefix_) {
        if (key.substr(0, prefix.size()) != prefix) continue;
        for (auto id : ids) per_watch[id].push_back(e);
      }
      continue;
    }
    // Every prefix of the key, the empty one included.
    for (std::size_t len = 0; len <= key.size(); ++len) {
      auto bp = by_prefix_.find(key.substr(0, len));
      if (bp == by_prefix_.end()) continue;
      for (auto id : bp->second) per_watch[id].push_back(e);
    }
  }
  return {std::make_move_iterator(per_watch.begin()), std::make_move_iterator(per_watch.end())};
}

}  // namespace ddp::store::server
