#include "event_history.hpp"

#include <algorithm>

#include "mutation.hpp"

namespace ddp::store::server {

std::vector<WatchEvent> events_of(const Mutation& m) {
  std::vector<WatchEvent> out;
  for (const auto& c : m.changes) {
    if (c.kind == Change::Kind::kPut) out.push_back({EventType::kPut, c.key, c.value, m.revision});
    else if (c.kind == Change::Kind::kDelete) out.push_back({EventType::kDelete, c.key, {}, m.revision});
  }
  return out;
}

void EventHistory::append(const std::vector<WatchEvent>& events) {
  for (const auto& e : events) events_.push_back(e);
  // Drop whole revisions only, so that "every event after compacted_" stays true.
  while (events_.size() > capacity_) {
    const auto rev = events_.front().revision;
    while (!events_.empty() && events_.front().revision == rev) events_.pop_front();
    compacted_ = std::max(compacted_, rev);
  }
}

std::optional<std::vector<WatchEvent>> EventHistory::since(std::string_view prefix,
                                                          Revision from) const {
  if (from <= compacted_) return std::nullopt;
  std::vector<WatchEvent> out;
  // Revisions increase along the ring: binary-search the first one wanted.
  auto it = std::lower_bound(events_.begin(), events_.end(), from,
                             [](const WatchEvent& e, Revision r) { return e.revision < r; });
  for (; it != events_.end(); ++it) {
    if (std::string_view(it->key).substr(0, prefix.size()) == prefix) out.push_back(*it);
  }
  return out;
}

}  // namespace ddp::store::server
