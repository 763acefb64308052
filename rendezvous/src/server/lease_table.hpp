// Leases: a TTL and the keys attached to it. Time is passed in by the caller
// (the server's clock, or a fake one in tests), so expiry is deterministic and
// testable without sleeping. Deleting the keys of an expired lease is the
// caller's job (StoreCore), which turns them into delete events.
//
// Thread-safety: none; owned by StoreCore.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ddp/common/deadline.hpp"
#include "ddp/store/protocol.hpp"
#include "ddp/store/store.hpp"

namespace ddp::store::server {

struct Lease {
  LeaseId id = 0;
  Millis ttl{0};
  Clock::time_point expiry;
  std::set<std::string> keys;
};

class LeaseTable {
 public:
  // One year: why, in protocol.hpp.
  static constexpr Millis kMaxTtl{kMaxLeaseTtlMs};

  LeaseId grant(Millis ttl, Clock::time_point now);
  // Re-creates a persisted lease after a restart, with its full TTL counted from
  // `now` (like etcd), so agents whose daemon restarts keep their keys. A TTL
  // that does not fit the clock (an old log) saturates instead of overflowing.
  void restore(LeaseId id, Millis ttl, Clock::time_point now);
  // Extends the lease to now + ttl; nullopt when it does not exist or is past due.
  std::optional<Millis> keepalive(LeaseId id, Clock::time_point now);
  bool exists(LeaseId id) const { return leases_.count(id) != 0; }
  // Removes the lease; returns it (with its keys) if it existed.
  std::optional<Lease> revoke(LeaseId id);
  // Removes and returns every lease whose expiry is <= now, oldest first.
  std::vector<Lease> take_expired(Clock::time_point now);
  std::optional<Clock::time_point> next_expiry() const;

  void attach(LeaseId id, const std::string& key);
  void detach(LeaseId id, const std::string& key);

  std::size_t size() const { return leases_.size(); }
  LeaseId next_id() const { return next_id_; }
  void restore_next_id(LeaseId id) { next_id_ = std::max(next_id_, id); }
  const std::unordered_map<LeaseId, Lease>& leases() const { return leases_; }

 private:
  std::unordered_map<LeaseId, Lease> leases_;
  std::set<std::pair<Clock::time_point, LeaseId>> by_expiry_;
  LeaseId next_id_ = 1;
};

}  // namespace ddp::store::server
