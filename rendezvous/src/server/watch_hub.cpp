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
  for (const auto& r : route_by_prefix(events)) {
    for (auto id : r.watchers) {
      auto& mine = per_watch[id];
      for (const auto* e : r.events) mine.push_back(*e);
    }
  }
  return {std::make_move_iterator(per_watch.begin()), std::make_move_iterator(per_watch.end())};
}

std::vector<WatchHub::PrefixRoute> WatchHub::route_by_prefix(const std::vector<WatchEvent>& events) const {
  std::map<std::string_view, std::vector<const WatchEvent*>> per_prefix;
  for (const auto& e : events) {
    const std::string_view key(e.key);
    if (by_prefix_.size() <= key.size()) {
      for (const auto& [prefix, ids] : by_prefix_) {
        if (key.substr(0, prefix.size()) == prefix) per_prefix[prefix].push_back(&e);
      }
      continue;
    }
    // Every prefix of the key, the empty one included.
    for (std::size_t len = 0; len <= key.size(); ++len) {
      auto bp = by_prefix_.find(key.substr(0, len));
      if (bp != by_prefix_.end()) per_prefix[bp->first].push_back(&e);
    }
  }
  std::vector<PrefixRoute> out;
  out.reserve(per_prefix.size());
  for (auto& [prefix, evs] : per_prefix) {
    const auto& ids = by_prefix_.find(prefix)->second;
    out.push_back(PrefixRoute{std::vector<WatchId>(ids.begin(), ids.end()), std::move(evs)});
  }
  return out;
}

}  // namespace ddp::store::server
