#include "event_history.hpp"

#include <algorithm>

#include "mutation.hpp"

namespace ddp::store::server {
namespace {

std::size_t weight(const WatchEvent& e) { return e.key.size() + e.value.size(); }

bool under(const WatchEvent& e, std::string_view prefix) {
  return std::string_view(e.key).substr(0, prefix.size()) == prefix;
}

}  // namespace

std::vector<WatchEvent> events_of(const Mutation& m) {
  std::vector<WatchEvent> out;
  for (const auto& c : m.changes) {
    if (c.kind == Change::Kind::kPut)
      out.push_back({EventType::kPut, c.key, c.value, m.revision});
    else if (c.kind == Change::Kind::kDelete)
      out.push_back({EventType::kDelete, c.key, {}, m.revision});
  }
  return out;
}

void EventHistory::append(const std::vector<WatchEvent>& events) {
  for (const auto& e : events) {
    events_.push_back(e);
    bytes_ += weight(e);
  }
  // Drop whole revisions only, so that "every event after compacted_" stays true.
  while (!events_.empty() && (events_.size() > limits_.max_events || bytes_ > limits_.max_bytes)) {
    compact_to(events_.front().revision);
  }
  // A deque keeps its blocks; give them back once the ring has emptied (a huge
  // value dropped at once), so the memory follows the bound.
  if (events_.empty()) events_.shrink_to_fit();
}

void EventHistory::compact_to(Revision revision) {
  while (!events_.empty() && events_.front().revision <= revision) {
    bytes_ -= weight(events_.front());
    events_.pop_front();
  }
  compacted_ = std::max(compacted_, revision);
  while (!forgotten_order_.empty() && forgotten_order_.front().first <= compacted_) {
    const auto& [rev, prefix] = forgotten_order_.front();
    // The same prefix forgotten again later (a run id used again) stays.
    if (auto it = forgotten_.find(prefix); it != forgotten_.end() && it->second <= rev) forgotten_.erase(it);
    forgotten_order_.pop_front();
  }
}

Revision EventHistory::compacted_for(std::string_view prefix) const {
  Revision out = compacted_;
  if (forgotten_.empty()) return out;
  // Forgotten prefixes `prefix` lies in: one lookup per prefix of it.
  for (std::size_t len = 0; len <= prefix.size(); ++len) {
    if (auto it = forgotten_.find(prefix.substr(0, len)); it != forgotten_.end())
      out = std::max(out, it->second);
  }
  // Forgotten prefixes that lie in `prefix`: a range of the sorted map.
  for (auto it = forgotten_.lower_bound(prefix); it != forgotten_.end() && it->first.starts_with(prefix);
       ++it)
    out = std::max(out, it->second);
  return out;
}

void EventHistory::forget(std::string_view prefix, Revision revision) {
  if (revision <= compacted_) return;
  std::erase_if(events_, [&](const WatchEvent& e) {
    if (e.revision > revision || !under(e, prefix)) return false;
    bytes_ -= weight(e);
    return true;
  });
  auto [it, added] = forgotten_.try_emplace(std::string(prefix), revision);
  if (!added) it->second = std::max(it->second, revision);
  forgotten_order_.emplace_back(revision, it->first);
  if (forgotten_order_.size() > kMaxForgotten) compact_to(forgotten_order_.front().first);
  if (events_.empty()) events_.shrink_to_fit();
}

std::optional<std::vector<WatchEvent>> EventHistory::since(std::string_view prefix, Revision from) const {
  if (from <= compacted_for(prefix)) return std::nullopt;
  std::vector<WatchEvent> out;
  // Revisions increase along the ring: binary-search the first one wanted.
  auto it = std::lower_bound(events_.begin(), events_.end(), from,
                             [](const WatchEvent& e, Revision r) { return e.revision < r; });
  for (; it != events_.end(); ++it) {
    if (under(*it, prefix)) out.push_back(*it);
  }
  return out;
}

std::optional<Revision> EventHistory::visit(std::string_view prefix, Revision from,
                                            const FrameVisitor& frame) const {
  if (from <= compacted_for(prefix)) return std::nullopt;
  auto it = std::lower_bound(events_.begin(), events_.end(), from,
                             [](const WatchEvent& e, Revision r) { return e.revision < r; });
  Revision next = from;
  std::vector<const WatchEvent*> group;
  while (it != events_.end()) {
    const auto rev = it->revision;
    group.clear();
    for (; it != events_.end() && it->revision == rev; ++it) {
      if (under(*it, prefix)) group.push_back(&*it);
    }
    next = rev + 1;
    if (!group.empty() && !frame(rev, group)) break;
  }
  return next;
}

}  // namespace ddp::store::server
