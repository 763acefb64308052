// What the static and c10d handlers share: the store (hosted or remote), the
// lease and round monitor, success/failure keys, closing, and moving every node
// of a round to the next one together. Private to ddp_rdzv.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ddp/rdzv/rendezvous.hpp"
#include "keys.hpp"
#include "rejoin_watch.hpp"
#include "round_monitor.hpp"
#include "store_access.hpp"

namespace ddp::rdzv::detail {

// Thread-safety: as RendezvousHandler. The destructor revokes this node's lease
// (its records vanish at once, or within its TTL if the store does not answer
// within a second) and stops the hosted store, if any. It first writes
// P/stopped/<group rank>: the caller's workers must be gone by then, and the
// others start their next round without waiting out the fence for this node. Once all_succeeded() was
// true, or once it closed the job, the node hosting the store first waits (at
// most the keep-alive window) for the other members to leave: this is the
// job's exit barrier, and it lets the others read why the job ended.
class StoreHandler : public RendezvousHandler {
 public:
  ~StoreHandler() override;

  void report_failure(const std::string& reason) override;
  void report_success() override;
  bool all_succeeded() override;
  void close(const std::string& reason) override;
  void set_event_callback(RoundEventCallback cb) override;
  std::shared_ptr<store::Store> store() override;
  Exclusion exclude_self(const std::string& why) override;     // store_handler_exclusion.cpp
  void set_departure_callback(DepartureCallback cb) override;  // take_place.cpp
  Place settle_place(const Departure& d, bool offer, bool may_shrink) override;
  void set_newcomer_callback(std::function<void(std::int64_t, const std::string&)> cb) override;
  void admit_newcomers(std::int64_t round, bool admit, const std::string& detail) override;

 protected:
  StoreHandler(const RendezvousConfig& config, const NodeSpec& self, StoreAccess access);

  // The round this call of next_rendezvous joins: the job's current round on the
  // first call (throws RendezvousError if the job was closed), else the one after
  // ours, after marking ours ended so that every member moves on with us. With
  // `defer`, those writes are appended there for the caller to send along with
  // its arrival (one round trip) instead of being sent now. The first call
  // sends `with_first` in the same write as its read, and leaves their answers
  // there; later calls leave them unsent (`with_first` is then cleared).
  std::int64_t round_to_join(std::vector<store::BatchOp>* defer = nullptr,
                             std::vector<store::BatchOp>* with_first = nullptr);
  // Publishes `result` as the current round and starts watching it; node records
  // deleted at or after `node_from` count as departures. Control keys are
  // watched from `ctl_from` when the caller knows no control key can predate
  // it; otherwise they are listed first.
  void start_round(const RendezvousResult& result, store::Revision node_from, bool can_grow,
                   std::optional<store::Revision> ctl_from = std::nullopt);
  // Moves the job's round pointer from `round` to `round + 1` (idempotent).
  void advance_pointer(std::int64_t round);
  store::BatchOp advance_pointer_op(std::int64_t round) const;
  // Closes the job from a node that has no round of its own yet (it found a
  // mistake while joining `round`): members already running `round` end it,
  // and whoever waits to join it or the next one is told `why`. `other`: the
  // group rank of a node known to be joining `round` whose record may not be
  // there yet; the exit barrier waits for it to come (and go).
  void close_while_joining(std::int64_t round, const std::string& why,
                           std::optional<int> other = std::nullopt);
  // A RendezvousError for the job having been closed by some node.
  [[noreturn]] void throw_closed(const std::string& reason) const;
  // ExcludedError (exit 6) when this node's host is excluded from the job;
  // `why` is the value of its key under keys::excluded_prefix.
  [[noreturn]] void throw_excluded(const std::string& why) const;
  void wait_for_members_to_leave();

  std::string prefix_of(std::int64_t round) const { return round_prefix(config_.run_id, round); }
  std::string rdzv_key(const std::string& rel) const { return rdzv_prefix_ + rel; }

  RendezvousConfig config_;
  NodeSpec self_;
  StoreAccess access_;
  std::shared_ptr<store::Store> store_;
  std::unique_ptr<RoundMonitor> monitor_;
  std::string rdzv_prefix_;

  std::mutex mu_;
  std::optional<RendezvousResult> current_;
  // The members the round closed with (current_'s group_world_size, unless
  // this node joined it while it ran): the job's success needs them and the
  // newcomers that grew it (P/grown).
  int closed_members_ = 0;
  // The members whose success the job waits for: closed_members_ + P/grown.
  std::int64_t members_to_succeed(const std::string& prefix);
  void set_closed_members(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    closed_members_ = n;
  }
  bool reported_success_ = false;
  bool joined_once_ = false;
  bool done_seen_ = false;  // all_succeeded() was true for current_
  // This node closed the job while the others were in (or joining) this round.
  std::optional<std::int64_t> closed_round_;
  std::optional<int> closed_on_rank_;  // close_while_joining's `other`
  // While this node rejoins: the members of the last round it was a member of
  // that are gone (kept across aborted rounds, until a round closes). Only the
  // next_rendezvous() thread sets it.
  std::shared_ptr<RejoinWatch> rejoin_;
};

}  // namespace ddp::rdzv::detail
