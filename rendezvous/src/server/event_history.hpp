// A bounded ring of the most recent put/delete events, so that a watch can start
// from a past revision (typically a list()'s revision + 1) and lose nothing.
// Events older than the ring are compacted: a watch from before them fails with
// kCompacted rather than silently skipping changes.
//
// Thread-safety: none; owned by StoreCore.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <string_view>
#include <vector>

#include "ddp/store/store.hpp"

namespace ddp::store::server {

class EventHistory {
 public:
  // Why 100k: a rendezvous round of 10,000 agents writes a few events each; the
  // ring must outlive one round so a slow agent's watch can still catch up.
  static constexpr std::size_t kDefaultCapacity = 100'000;

  explicit EventHistory(std::size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  // Appends events (all of one revision, newer than anything held).
  void append(const std::vector<WatchEvent>& events);
  // Events under `prefix` with revision >= from, in order; nullopt when some of
  // them were already dropped (from <= compacted_revision()).
  std::optional<std::vector<WatchEvent>> since(std::string_view prefix, Revision from) const;
  // Every event with revision <= this is gone.
  Revision compacted_revision() const { return compacted_; }
  // After a restart from a snapshot, history before the snapshot is unknown.
  void reset(Revision compacted) {
    events_.clear();
    compacted_ = compacted;
  }
  std::size_t size() const { return events_.size(); }
  const std::deque<WatchEvent>& events() const { return events_; }

 private:
  std::size_t capacity_;
  std::deque<WatchEvent> events_;
  Revision compacted_ = 0;
};

}  // namespace ddp::store::server
