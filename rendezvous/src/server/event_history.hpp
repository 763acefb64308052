// A bounded ring of the most recent put/delete events, so that a watch can start
// from a past revision (typically a list()'s revision + 1) and lose nothing.
// Events older than the ring are compacted: a watch from before them fails with
// kCompacted rather than silently skipping changes.
//
// The ring is bounded twice: by event count and by the bytes of its keys and
// values, whichever is reached first. Whole revisions are dropped, oldest
// first, so "every event after compacted_revision()" always holds.
//
// Thread-safety: none; owned by StoreCore.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddp/store/store.hpp"

namespace ddp::store::server {

struct HistoryLimits {
  // Why 100k: a rendezvous round of 10,000 agents writes a few events each; the
  // ring must outlive one round so a slow agent's watch can still catch up.
  static constexpr std::size_t kDefaultMaxEvents = 100'000;
  // Why 64 MiB: 100k rendezvous events of a few hundred bytes fit with room to
  // spare, while large values (checkpoint metadata, 1 MiB each) cannot make the
  // daemon hold more than this in past values. One value larger than the cap is
  // not retained at all: a watch from its revision answers COMPACTED.
  static constexpr std::size_t kDefaultMaxBytes = 64u << 20;

  std::size_t max_events = kDefaultMaxEvents;
  std::size_t max_bytes = kDefaultMaxBytes;
};

class EventHistory {
 public:
  explicit EventHistory(HistoryLimits limits = {}) : limits_(limits) {}

  // Appends events (all of one revision, newer than anything held).
  void append(const std::vector<WatchEvent>& events);
  // Events under `prefix` with revision >= from, in order; nullopt when some of
  // them were already dropped (from <= compacted_revision()).
  std::optional<std::vector<WatchEvent>> since(std::string_view prefix, Revision from) const;
  // Streams instead of copying: calls `frame` with the events under `prefix` of
  // each revision >= from, one revision at a time, in order, until `frame`
  // returns false or the ring ends. Returns the revision to continue from (one
  // past the last revision visited), or nullopt when `from` is compacted.
  using FrameVisitor = std::function<bool(Revision, const std::vector<const WatchEvent*>&)>;
  std::optional<Revision> visit(std::string_view prefix, Revision from, const FrameVisitor& frame) const;
  // Every event with revision <= this is gone.
  Revision compacted_revision() const { return compacted_; }
  // For a watch of `prefix`: every event under it after this revision is
  // held (compacted_revision(), or later where a forgotten prefix overlaps).
  Revision compacted_for(std::string_view prefix) const;
  // Drops the events under `prefix` (a reclaimed job's, which nobody can
  // watch to any purpose any more), all of revision <= `revision`. From then
  // on a watch of a prefix that overlaps it (contains it or lies in it) from
  // a revision <= `revision` is compacted; one of any other prefix is not.
  // At most kMaxForgotten prefixes are remembered: past that, the oldest is
  // folded into an ordinary compaction up to its revision.
  void forget(std::string_view prefix, Revision revision);
  // Why 4096: a finished job is three prefixes, so the last 1,365 reclaimed
  // jobs are remembered (about 300 KB); a watch from before the oldest of them
  // is long out of date anyway.
  static constexpr std::size_t kMaxForgotten = 4096;
  std::size_t forgotten() const { return forgotten_order_.size(); }
  // After a restart from a snapshot, history before the snapshot is unknown.
  void reset(Revision compacted) {
    events_.clear();
    forgotten_.clear();
    forgotten_order_.clear();
    bytes_ = 0;
    compacted_ = compacted;
  }
  std::size_t size() const { return events_.size(); }
  // Key and value bytes held (what max_bytes bounds).
  std::size_t bytes() const { return bytes_; }
  const HistoryLimits& limits() const { return limits_; }
  const std::deque<WatchEvent>& events() const { return events_; }

 private:
  HistoryLimits limits_;
  // Drops whole revisions from the front up to `revision`.
  void compact_to(Revision revision);

  std::deque<WatchEvent> events_;
  // Forgotten prefixes: the latest revision of each, for lookups by prefix,
  // and every forget in order, oldest first, for the bound.
  std::map<std::string, Revision, std::less<>> forgotten_;
  std::deque<std::pair<Revision, std::string>> forgotten_order_;
  std::size_t bytes_ = 0;
  Revision compacted_ = 0;
};

}  // namespace ddp::store::server
