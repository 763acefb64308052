// The c10d-style dynamic rendezvous: MIN:MAX nodes, O(1) store requests per
// agent per round. docs/rendezvous.md has the algorithm, key layout and costs.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "arrival_step.hpp"
#include "keys.hpp"
#include "store_handler.hpp"

namespace ddp::rdzv {

// Thread-safety: as RendezvousHandler.
class DynamicHandler final : public detail::StoreHandler {
 public:
  // `arrivals` null: the counter on P/seq (the built-in store's way).
  DynamicHandler(const RendezvousConfig& config, const NodeSpec& self, detail::StoreAccess access,
                 std::unique_ptr<detail::ArrivalStep> arrivals = nullptr);

  std::string backend() const override { return "c10d"; }
  RendezvousResult next_rendezvous() override;

 private:
  // P/closed: "<count> <workers> <list revision>[ <fence ms>]", "abort <why>" or
  // "closed <why>". The fence is what the closer still had to wait after a
  // departure when it decided: every member waits that long from its reading.
  struct Closed {
    enum class Kind : std::uint8_t { kFinal, kAbort, kJobClosed } kind = Kind::kFinal;
    int count = 0;
    int workers = 0;
    store::Revision listed = 0;
    std::chrono::milliseconds fence{0};
    std::string why;
  };
  static Closed parse_closed(const std::string& text);
  // The decision closing a round of `count` arrivals with `workers` workers,
  // listed at `listed`, with this node's fence still to wait.
  std::string final_decision(int count, int workers, store::Revision listed) const;
  // Before this node's workers of `round` start: waits until every departure
  // this node saw, and the one the closer saw, is a fence margin old
  // (docs/rendezvous.md, "Fencing").
  void wait_out_fence(std::int64_t round, const Closed& closed, Clock::time_point read_at);

  // "MIN:MAX", as the job's first node recorded it.
  std::string job_config() const;
  // Throws ConfigError unless the job was started with this node's --nnodes;
  // `job_value`: the job's value, already read (else read and set if absent).
  void check_job_config(std::optional<std::string> job_value = std::nullopt);
  // Decides the round's members (the arrivals counted in `seen`) unless some
  // other node already did; returns the decision everyone reads.
  Closed close_round(std::int64_t round, std::int64_t seen);
  // Waits for P/closed as arrival `index`; the last arrival past MIN closes the
  // round once no one else arrived for last_call_timeout.
  // `record`, when given, is this node's record, sent with the first wait.
  Closed wait_closed(std::int64_t round, int index, const Deadline& deadline,
                     store::BatchOp* record = nullptr);
  // Arrival `mine` of `round`: writes this node's `record` and waits for the
  // round to close (or closes it, as the last arrival).
  Closed arrive_and_wait(std::int64_t round, std::int64_t mine, store::BatchOp record,
                         const Deadline& deadline);
  // A restart round: closes it now if its arrivals are exactly the members of
  // `prev` that are still alive and no newcomer waits (docs/rendezvous.md,
  // "Restart rounds close at once"). Safe to call from the rejoin watch's
  // thread while the joining thread waits; false leaves the last call to decide.
  // `records_wait` bounds the wait for the counted arrivals' records.
  bool try_close_early(std::int64_t round, const detail::PreviousRound& prev,
                       std::chrono::milliseconds records_wait);
  // Waits up to `timeout` for the records of a round's first `n` arrivals.
  // 0 once all are written; else how many of those arrivals are gone: their
  // P/joining/ marker (written with the arrival, under its lease) ended before
  // they wrote their record, or the record itself ended. Throws TimeoutError.
  int wait_records(const std::string& prefix, int n, std::chrono::milliseconds timeout);
  // The hot spares that waited beside `old_prefix`'s round and are still alive
  // (their records share their leases); nullopt when some other node waited
  // there too (a newcomer: the last call is for it).
  std::optional<std::set<std::string>> live_spares(const std::string& old_prefix);
  // A late joiner of a round of MAX nodes is a hot spare: one that runs another
  // --nproc_per_node than the job's nodes is refused (ConfigError); else its
  // record goes under the round's spare/ and on_spare is called.
  void register_spare(std::int64_t round, const Closed& closed);
  // Before a round's closing decision, after its listing: makes every control
  // key of the round newer than the listing (the members watch from there).
  void close_listing(const std::string& prefix);
  // What a node waiting beside a running round sees: the keys it watches
  // written, or the end of the watch. Filled by watch callbacks, drained by
  // the waiting thread.
  struct RoundWatch {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<store::WatchEvent> events;
    std::optional<std::string> error;
    // A watch of `prefix` from revision `from` that fills `w`.
    static store::WatchSpec spec(const std::shared_ptr<RoundWatch>& w, std::string prefix,
                                 store::Revision from);
    // The events come so far, after waiting for one until `until`; throws
    // RendezvousError, naming `round`, once the watch ended.
    std::deque<store::WatchEvent> take(Clock::time_point until, std::int64_t round);
  };
  // A late joiner: counted in P/ctl/waiting (the members see kNodesWaiting),
  // then waits for the round to end, or for its job to finish (JobFinished).
  // `counted`: this node already counted itself in P/ctl/waiting.
  void wait_ended(std::int64_t round, const Deadline& deadline, bool counted = false);
  // Every node of `round` succeeded (P/done): the job is over for a node that
  // arrives late to it, and for one that waited beside it. `waited` throws
  // JobFinished (ddprun exits 0), else RendezvousError: the job is closed.
  [[noreturn]] void throw_finished(std::int64_t round, bool waited);
  // A record of `round` vanished while this node waited beside it: with none
  // left (every member died, or the last ones finished after the others were
  // lost) nobody would end the round, so this node ends it
  // (membership_changed) and returns true: it joins the next round, as it
  // would had a member ended it. JobFinished when the round did finish.
  bool end_if_deserted(std::int64_t round);
  // A hot spare with take_places (take_place.cpp): waits beside `round` for it
  // to end (nullopt: join the next) or for a member to leave, and then,
  // after the fence, claims that member's place and joins `round` in it. A
  // place given up meanwhile (no spare took it) makes it a newcomer.
  // A newcomer to a round whose nodes run other --nproc_per_node than this
  // one: nullopt at once. JobFinished when the job finishes meanwhile.
  // `counted` says whether it counted this node in P/ctl/waiting.
  std::optional<RendezvousResult> wait_to_take_place(std::int64_t round, const Deadline& deadline,
                                                     bool& counted);
  // `offset`: the rank offset of the place taken (the lost member's).
  RendezvousResult take_place(std::int64_t round, const Closed& closed, int rank, int offset,
                              const NodeSpec& replaced);
  // An offer (`ev`, a put under P/offer/) claimed: this node takes that place.
  std::optional<RendezvousResult> claim_offer(std::int64_t round, const Closed& closed,
                                              const store::WatchEvent& ev);
  // The rank offset of the place `offer` at group rank `rank` for this node:
  // the lost member's, where it ran as many workers as this one; -1 (logged)
  // where this node cannot take it.
  int place_offset(const Closed& closed, int rank, const detail::Offer& offer) const;
  // How many places the round at `prefix` gave up (P/ctl/gone/<g>): the job
  // went on without them, and each leaves room below MAX for a newcomer.
  int given_up_places(const std::string& prefix);
  // The first new group rank this newcomer claims (P/grow/<g>), if any: below
  // MAX + the places given up, which `given_up` returns.
  std::optional<int> claim_new_rank(const std::string& prefix, const Closed& closed, int& given_up);
  RendezvousResult grow_into(std::int64_t round, const Closed& closed, int rank, int given_up);
  void log_progress(std::int64_t round, const Deadline& deadline);
  [[noreturn]] void throw_timeout(std::int64_t round, bool late);

  std::unique_ptr<detail::ArrivalStep> arrivals_;
  // The full round this node last waited beside as a spare, and its size; its
  // next round may close as soon as that round's live members and spares are in.
  std::optional<detail::PreviousRound> spare_of_;
  bool config_checked_ = false;
  Clock::time_point last_progress_{};
};

}  // namespace ddp::rdzv
