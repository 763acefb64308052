// A committed change to the store's state: what watchers, waiters and the
// persistence log all consume. One client operation is one Mutation, and every
// key change in it shares one revision (like an etcd transaction), so a
// multi_set is seen atomically by watchers and replayed atomically from the log.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddp/store/store.hpp"

namespace ddp::store::server {

struct Change {
  enum class Kind : std::uint8_t { kPut = 0, kDelete = 1, kLeaseGrant = 2, kLeaseRevoke = 3 };
  Kind kind = Kind::kPut;
  std::string key;          // kPut, kDelete
  std::string value;        // kPut
  LeaseId lease = 0;        // kPut: the key's lease after the change; kLease*: the lease
  LeaseId prev_lease = 0;   // kPut, kDelete: the key's lease before (not persisted)
  std::int64_t ttl_ms = 0;  // kLeaseGrant
};

struct Mutation {
  // Revision of the key changes: 0 until the first key change bumps the store's
  // revision; lease-only mutations are then given the current revision.
  Revision revision = 0;
  std::vector<Change> changes;

  bool empty() const { return changes.empty(); }
};

// The put/delete events of a mutation, in order, as watchers see them.
std::vector<WatchEvent> events_of(const Mutation& m);

}  // namespace ddp::store::server
