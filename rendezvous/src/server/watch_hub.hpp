// Prefix watchers. route() maps one mutation's events to the watchers that see
// them, keeping the events' order, so that delivering route() results in the
// order mutations commit gives every watcher its events in revision order.
// Replay of past events comes from EventHistory; the owner registers the watcher
// and replays in the same critical step, so nothing slips between the two.
//
// Thread-safety: none; owned by the server's loop thread or MemoryStore's mutex.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ddp/store/store.hpp"

namespace ddp::store::server {

using WatchId = std::uint64_t;

class WatchHub {
 public:
  void add(WatchId id, std::string prefix);
  bool remove(WatchId id);
  // For each watcher (ascending id) the subset of `events` under its prefix.
  std::vector<std::pair<WatchId, std::vector<WatchEvent>>> route(const std::vector<WatchEvent>& events) const;
  // The same, once per watched prefix: the watchers of one prefix share one
  // list of events (pointers into `events`, in their order), so a server can
  // build their frames once however many watch it (a whole cluster watching
  // node/ during a mass expiry).
  struct PrefixRoute {
    std::vector<WatchId> watchers;  // ascending
    std::vector<const WatchEvent*> events;
  };
  std::vector<PrefixRoute> route_by_prefix(const std::vector<WatchEvent>& events) const;
  std::size_t size() const { return prefix_of_.size(); }

 private:
  // Indexed by prefix so routing costs O(key length) lookups, not O(watchers):
  // thousands of agents usually watch the same few prefixes.
  std::map<std::string, std::set<WatchId>, std::less<>> by_prefix_;
  std::unordered_map<WatchId, std::string> prefix_of_;
};

}  // namespace ddp::store::server
