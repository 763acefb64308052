// Watches one running round for the reasons it must end, and keeps this node's
// lease alive. Shared by the static and c10d handlers. Private to ddp_rdzv.
//
// Keys it reads under the round prefix P (docs/rendezvous.md):
//   P/node/<group_rank>     node records, attached to each node's lease
//   P/ctl/waiting           count of late joiners (scale-up)
//   P/ctl/ended             "<event code> <detail>": the round is over (a node
//                           reported a failure, or moved to the next round)
//   P/success/<group_rank>  the node's workers succeeded (its record may vanish)
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ddp/common/deadline.hpp"
#include "ddp/rdzv/rendezvous.hpp"
#include "ddp/store/store.hpp"

namespace ddp::rdzv::detail {

struct WatchedRound {
  std::int64_t round = 0;
  std::string prefix;             // round prefix, ends with '/'
  int self_rank = 0;              // this node's group rank
  std::string self_id;            // this node's node_id
  int group_world_size = 1;       // members are group ranks [0, n)
  bool can_grow = false;          // fewer than max nodes: waiting nodes mean a scale-up
  std::vector<NodeSpec> nodes;    // by group rank when known (for messages), may be empty
  bool nodes_listed = true;       // false: unread records run as many workers as self's
  store::Revision node_from = 0;  // watch node/ from here (no deletion after it is lost)
  store::ListResult ctl;          // ctl/ as listed before watching from ctl.revision + 1
};

// How much earlier than its lease can end a silent node kills its workers, and
// how long after a member's lease ended the others wait before their next
// round's workers start: half a keep-alive interval each way. The inequality
// it keeps is in docs/rendezvous.md, "Fencing".
std::chrono::milliseconds fence_margin(std::chrono::milliseconds keep_alive_interval);

// Thread-safety: all methods may be called from any thread. Events run on one
// internal thread and keepalives on another; both may call the event callback
// (never at the same time); watch callbacks only enqueue. After end() returns, no event
// of the ended round reaches the callback.
class RoundMonitor {
 public:
  // `keep_alive_window` (rdzv::keep_alive_window) is the lease's TTL and how
  // long the store may stay silent. `store_name` ("the rendezvous store at
  // HOST:PORT") starts every kStoreLost detail, so that the agent's error
  // names what it lost.
  RoundMonitor(std::shared_ptr<store::Store> store, std::chrono::milliseconds keep_alive_interval,
               std::chrono::milliseconds keep_alive_window, std::string store_name = "the rendezvous store");
  ~RoundMonitor();  // cancels watches, stops and joins the thread; does not revoke
  RoundMonitor(const RoundMonitor&) = delete;
  RoundMonitor& operator=(const RoundMonitor&) = delete;

  // This node's lease, granted on first use and again after it expired.
  store::LeaseId lease();
  // For a caller that sends the first grant in a batch of its own: the grant
  // lease() would send, or nullopt once a lease is held. Its answer goes to
  // adopt_lease, with when the batch was sent.
  std::optional<store::BatchOp> lease_grant_op() const;
  store::LeaseId adopt_lease(store::LeaseId id, Clock::time_point sent);
  // Revokes the lease now, so this node's records vanish without waiting for the
  // TTL. Returns within `deadline` even when the store does not answer. With
  // `stopped_key`, sets it first: this node's workers are gone, its departure
  // needs no fence.
  void revoke(std::chrono::milliseconds deadline = std::chrono::milliseconds(1000),
              const std::string& stopped_key = "");
  void set_callback(RoundEventCallback cb);
  // Set: a member leaving without success goes to `cb`, once per departure,
  // instead of firing kMembershipChanged (RendezvousHandler::set_departure_callback).
  void set_departure_callback(DepartureCallback cb);
  // Set: a newcomer counted in ctl/waiting goes to `cb` instead of firing kNodesWaiting.
  void set_newcomer_callback(std::function<void(std::int64_t round, const std::string& detail)> cb);

  // Starts watching; events already visible in r.ctl are delivered at once.
  void begin(WatchedRound r);
  // Stops watching the current round. Returns the first event seen in it, if any,
  // so the next round's "ended" marker can pass the reason on.
  std::optional<std::pair<RoundEvent, std::string>> end();
  // As end(), but keeps following the ended round's node records: each one
  // deleted later is passed to `on_departure(group rank)` on the event thread
  // until stop_departures(). `departed` receives the ranks already seen leaving.
  // This is how a rejoining node learns, without a new watch, which members of
  // its previous round are gone (rejoin_watch.hpp).
  std::optional<std::pair<RoundEvent, std::string>> end(std::function<void(std::int64_t)> on_departure,
                                                        std::set<std::int64_t>& departed);
  // Whether the round that the last end() stopped had its ctl/ended marker
  // written (this node saw it): the next round need not write it again.
  bool ended_marker_seen() const;
  // Ends what end(on_departure, …) kept; no departure is passed on after it returns.
  void stop_departures();
  // This node already knows about its own kind of event (it reported the failure):
  // do not echo it back to the agent.
  void suppress(RoundEvent e);
  // The earliest time the workers of this node's next round may start: the
  // fence margin after the latest departure seen (a member's record vanished
  // without its success key), so that the departed node, if it is only cut
  // off, has killed its workers by then. Clock::time_point{} when none.
  Clock::time_point fence_until() const;
  // The client reconnected: a lease bound to the old connection may be gone.
  // Sends a keep-alive now rather than at the next interval.
  void keepalive_now();
  // Passes the fence backstop's deadline to `sink` each time it moves
  // (RendezvousConfig::on_fence_deadline). Set before the first lease().
  void set_fence_sink(std::function<void(Clock::time_point)> sink);

 private:
  // Both end()s: with `departed`, the ended round's node watch is kept for
  // `on_departure`.
  std::optional<std::pair<RoundEvent, std::string>> finish(std::function<void(std::int64_t)> on_departure,
                                                           std::set<std::int64_t>* departed);
  struct Pending {
    std::uint64_t epoch;
    store::WatchEvent ev;
    bool error = false;
  };
  // What the keepalive thread shares with the monitor. The thread owns a
  // reference, so the monitor can be destroyed while a keepalive still blocks
  // (a client reconnecting to a dead store): the thread is detached then and
  // finishes on its own.
  struct Keepalive {
    std::shared_ptr<store::Store> store;
    std::mutex mu;
    std::condition_variable cv;
    bool stop = false;
    store::LeaseId lease = 0;
    Clock::time_point last_ok;
    // When the latest keep-alive (or the grant) the store answered was sent:
    // the store renewed the lease after this, so it cannot end before this + TTL.
    Clock::time_point acked_send;
    bool send_now = false;                                                  // keepalive_now() asked
    std::function<void(store::LeaseId, const std::string&)> on_lease_lost;  // cleared on stop
    std::chrono::milliseconds backstop{0};                                  // TTL less half a fence margin
    std::function<void(Clock::time_point)> fence_sink;                      // cleared on stop
  };
  static void keepalive_loop(std::shared_ptr<Keepalive> k, std::chrono::milliseconds interval);

  void loop();
  void handle(const Pending& p);
  void on_lease_lost(store::LeaseId id, const std::string& why);
  void check_store_silence();
  // When this node must have killed its workers unless the store answers again.
  Clock::time_point fence_deadline() const;
  // What a member that left wrote before its lease went: success/<g> (its
  // workers succeeded) and stopped/<g> (its workers are gone: it left on
  // purpose). nullopt when the store cannot say.
  struct Departure {
    bool succeeded = false;
    bool stopped = false;
  };
  std::optional<Departure> read_departure(const std::string& round_prefix, std::int64_t rank);
  // Starts the fence for a departure unless it needs none.
  void note_departure(const std::optional<Departure>& d);
  // Delivers at most one event of each kind per round, and none once the round
  // of `epoch` ended.
  void fire(std::uint64_t epoch, RoundEvent e, const std::string& detail);
  // A departure to the departure callback: false when none is set (the
  // caller fires kMembershipChanged instead).
  bool depart(std::uint64_t epoch, int rank, store::Revision revision, const std::string& detail,
              const std::string& reason);
  // A newcomer to the newcomer callback: false when none is set.
  bool newcomer(std::uint64_t epoch, const std::string& detail);
  // A node record put in the round (a hot spare taking a place); mu_ held for set_node.
  static std::optional<NodeSpec> take_record(const std::string& value, const std::string& key);
  // Whether the record of `node_id` put at `put_revision` in group rank `rank`
  // (past the round's members) is a newcomer that grew the round.
  bool grown(const std::string& prefix, std::int64_t rank, const std::string& node_id,
             store::Revision put_revision);
  void set_node(int rank, NodeSpec node);
  // The departed group rank's rank offset, and the members and workers of
  // the round as this node knows them (rdzv::Departure); mu_ held.
  void describe_places(int rank, rdzv::Departure& d) const;
  std::string describe_rank(int rank) const;

  std::shared_ptr<store::Store> store_;
  const std::string store_name_;
  const std::chrono::milliseconds interval_;
  const std::chrono::milliseconds ttl_;
  const std::chrono::milliseconds fence_margin_;

  // Held while the agent's callback runs, so that end() returns only once no
  // callback of the ended round can still be running (the callback must not
  // call back into the handler's next_rendezvous: it only posts).
  std::mutex callback_mu_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  RoundEventCallback callback_;
  DepartureCallback departure_callback_;
  std::function<void(std::int64_t, const std::string&)> newcomer_callback_;
  std::uint64_t epoch_ = 0;  // bumped per round; events of older rounds are dropped
  bool active_ = false;
  WatchedRound round_;
  std::uint8_t fired_mask_ = 0;  // event kinds already delivered this round
  std::optional<std::pair<RoundEvent, std::string>> first_event_;
  bool marker_seen_ = false;        // ctl/ended arrived in the current round
  bool ended_marker_seen_ = false;  // ... in the round the last end() stopped
  std::deque<Pending> queue_;
  std::vector<std::unique_ptr<store::WatchHandle>> watches_;  // node/ first, then ctl/
  std::set<std::int64_t> departed_;  // group ranks of this round whose records vanished
  // Places given up in this round (ctl/gone/<g>) that this node holds no record
  // of, having come after: group rank -> how many ranks the place held.
  std::map<int, int> gone_workers_;
  std::int64_t waiting_ = 0;            // the round's P/ctl/waiting as last seen
  Clock::time_point last_departure_{};  // when the latest departure that is no success was seen
  // Kept by end(on_departure, …): the ended round's node watch and where its deletions go.
  std::unique_ptr<store::WatchHandle> departure_watch_;
  std::uint64_t departure_epoch_ = 0;
  std::string departure_prefix_;
  std::string departure_round_prefix_;
  std::function<void(std::int64_t)> departure_sink_;
  std::thread thread_;
  // Keepalives block while the client reconnects (up to its connect timeout), so
  // they get their own thread and the event thread judges silence by the clock.
  std::shared_ptr<Keepalive> keepalive_;
  std::thread keepalive_thread_;
};

// "<code> <detail>" as stored in P/ctl/ended, and back.
std::string encode_event(RoundEvent e, const std::string& detail);
std::pair<RoundEvent, std::string> decode_event(const std::string& text);

}  // namespace ddp::rdzv::detail
