// While a node rejoins after a round ended, follows which members of that
// round have gone for good (their node records, attached to their leases,
// vanished), so the next round can close as soon as every member still alive
// is back instead of waiting for the last call. docs/rendezvous.md, "Restart
// rounds close at once", has the rule. Private to ddp_rdzv.
//
// The departures come from the round monitor's own watch of the old round's
// records, kept past the round's end (RoundMonitor::end with a departure
// sink): no new watch, so nothing is replayed from the store's history and a
// long round whose history was compacted loses nothing either.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "ddp/store/store.hpp"

namespace ddp::rdzv::detail {

// The round a node was last a member of: enough to tell who may still rejoin.
struct PreviousRound {
  std::int64_t round = -1;
  int members = 0;  // group_world_size of that round
};

// Thread-safety: all methods may be called from any thread. The armed callback
// runs on an internal thread, one call at a time, and may use the store; the
// destructor waits for a running call to return.
class RejoinWatch {
 public:
  // `gone`: group ranks already seen leaving while the round ran.
  RejoinWatch(const PreviousRound& prev, std::set<std::int64_t> gone);
  ~RejoinWatch();
  RejoinWatch(const RejoinWatch&) = delete;
  RejoinWatch& operator=(const RejoinWatch&) = delete;

  const PreviousRound& previous() const { return prev_; }
  // The member of group rank `rank` left (its record vanished).
  void departed(std::int64_t rank);
  // From now on each departure calls `on_departure(live)` (and one call comes
  // at once for departures not yet passed on); nullptr disarms.
  void arm(std::function<void(int live)> on_departure);
  // Members of the previous round not seen leaving: an upper bound on how many
  // can still rejoin.
  int live() const;

 private:
  void loop();

  const PreviousRound prev_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::int64_t> gone_;
  bool pending_ = false;  // a departure not yet passed to the armed callback
  bool stop_ = false;
  std::function<void(int live)> on_departure_;
  std::thread thread_;
};

}  // namespace ddp::rdzv::detail
