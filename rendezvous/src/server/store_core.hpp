// The store's semantics over plain state: KvState + LeaseTable + EventHistory.
// Executes every request that answers at once (everything but the blocking part
// of get/wait and the streaming part of watch), keeps lease attachments in step
// with key changes, and hands each committed Mutation to a sink (persistence,
// watchers, waiters). The server's loop and MemoryStore both drive this one
// class, so both give identical answers.
//
// Thread-safety: none; the owner serialises access.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ddp/common/deadline.hpp"
#include "ddp/store/protocol.hpp"
#include "event_history.hpp"
#include "kv_state.hpp"
#include "lease_table.hpp"
#include "mutation.hpp"

namespace ddp::store::server {

class StoreCore {
 public:
  using Sink = std::function<void(const Mutation&)>;

  explicit StoreCore(HistoryLimits history_limits = {}) : history_(history_limits) {}

  // Called for every committed mutation, before the request's response exists
  // and before watchers or lease bookkeeping see it (so a log append precedes
  // the acknowledgement). When the sink throws, the mutation is undone (keys,
  // revision, leases as they were) and the exception goes to the caller: what
  // failed to persist is never visible.
  void set_sink(Sink sink) { sink_ = std::move(sink); }

  // Answers a request. kGet answers like kTryGet (kNotFound = caller blocks);
  // kWait answers kOk when all keys exist, else kNotFound. kHello, kWatch,
  // kCancel are the caller's; they answer kBadRequest here.
  Response execute(const Request& req, Clock::time_point now);

  // Keys of `keys` that do not exist, in order.
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;

  // Deletes the keys of every lease due at `now` in ONE mutation (one revision),
  // so a watcher sees a mass expiry (a power loss, a partition: thousands of
  // leases due in one tick) as one event frame, not one frame per lease: O(N)
  // frames for N watchers instead of O(N^2). A sink failure leaves all of them
  // in place and is rethrown. Returns how many leases expired.
  std::size_t expire_leases(Clock::time_point now);
  // Revokes the leases of `ids` that exist, in one mutation as above (the
  // leases bound to connections that closed in one loop turn). Returns how
  // many existed.
  std::size_t revoke_leases(const std::vector<LeaseId>& ids);
  // Deletes `keys` (those that exist) in one mutation, as the server's own
  // deletion (reclaiming old rounds and finished jobs). Returns how many existed.
  std::size_t erase_keys(const std::vector<std::string>& keys);
  std::optional<Clock::time_point> next_lease_expiry() const { return leases_.next_expiry(); }
  // How late a lease may be reaped so that leases due close together go in one
  // mutation (the server's lease timer fires this long after the first is due).
  // Requests that name a lease still reap it at once. 0 (the default): exact.
  void set_expiry_batch(Millis window) { expiry_batch_ = window; }
  Millis expiry_batch() const { return expiry_batch_; }

  // Past events for a watch from `from` (> 0); nullopt when compacted.
  std::optional<std::vector<WatchEvent>> history_since(const std::string& prefix, Revision from) const {
    return history_.since(prefix, from);
  }

  // Re-applies a logged mutation during recovery (no sink call).
  void replay(const Mutation& m, Clock::time_point now);

  const KvState& kv() const { return kv_; }
  KvState& kv() { return kv_; }
  const LeaseTable& leases() const { return leases_; }
  LeaseTable& leases() { return leases_; }
  EventHistory& history() { return history_; }
  const EventHistory& history() const { return history_; }
  Revision revision() const { return kv_.revision(); }

 private:
  // What a mutation overwrote, to put back when the sink refuses it.
  struct Undo {
    Revision revision = 0;
    std::vector<std::pair<std::string, std::optional<KvEntry>>> keys;
    std::vector<Lease> leases;  // revoked or expired leases to reinstate
    LeaseId granted = 0;        // a granted lease to remove
  };
  template <typename Keys>
  Undo capture(const Keys& keys) const;
  void undo(const Undo& u);
  void commit(Mutation& m, const Undo& u);
  // Updates lease attachments for the key changes of `m`.
  void track_leases(const Mutation& m);
  Response revoke(LeaseId id, Response resp);
  // Deletes the keys of `gone` (already taken out of the table) in one
  // mutation; on a sink failure the leases are put back and it rethrows.
  void drop_leases(std::vector<Lease> gone);

  KvState kv_;
  LeaseTable leases_;
  EventHistory history_;
  Sink sink_;
  Millis expiry_batch_{0};
};

}  // namespace ddp::store::server
