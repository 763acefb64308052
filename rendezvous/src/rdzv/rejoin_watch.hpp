// While a node rejoins after a round ended, follows which members of that
// round have gone for good (their node records, attached to their leases,
// vanished), so the next round can close as soon as every member still alive
// is back instead of waiting for the last call. docs/rendezvous.md, "Restart
// rounds close at once", has the rule. Private to ddp_rdzv.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "ddp/store/store.hpp"

namespace ddp::rdzv::detail {

// The round a node was last a member of: enough to tell who may still rejoin.
struct PreviousRound {
  std::int64_t round = -1;
  int members = 0;                // group_world_size of that round
  store::Revision node_from = 0;  // first revision after its close listing
};

// Thread-safety: live() may be called from any thread. `on_departure(live)`
// runs on an internal thread, one call at a time, and may use the store; the
// destructor cancels the watch and waits for a running call to return.
class RejoinWatch {
 public:
  // Watches `prefix`node/ (the previous round's records) from prev.node_from,
  // which replays every departure since that round closed: none is missed
  // however late this watch starts.
  RejoinWatch(std::shared_ptr<store::Store> store, std::string prefix, const PreviousRound& prev,
              std::function<void(int live)> on_departure);
  ~RejoinWatch();
  RejoinWatch(const RejoinWatch&) = delete;
  RejoinWatch& operator=(const RejoinWatch&) = delete;

  // Members of the previous round whose records this node has not seen vanish:
  // an upper bound on how many can still rejoin.
  int live() const;

 private:
  void loop();

  const std::string prefix_;
  const int members_;
  std::function<void(int live)> on_departure_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::int64_t> gone_;  // group ranks whose records vanished
  int pending_ = 0;              // departures not yet passed to on_departure_
  bool stop_ = false;
  std::unique_ptr<store::WatchHandle> watch_;
  std::thread thread_;
};

}  // namespace ddp::rdzv::detail
