// Per attempt, how long the node took to get its workers training: rendezvous
// (from the attempt's start to the closed round), spawn (to every worker
// started) and, for workers that report it, the first step (to every local
// worker's first step). The agent reports them in --event_log ("startup",
// "first_step") and in its status record (`ddp-store status`); docs/agent.md,
// "Startup times".
//
// A worker reports its first step by setting `<DDP_STORE_PREFIX>ddp/first_step/<RANK>`
// in the round's store: ddp::report_first_step() in the C++ SDK does it, and
// any worker can with `ddp-store set`. The agent watches that prefix, which
// costs nothing per step: each worker writes once per attempt.
//
// Thread-safety: the io thread only; the watch's callback only posts to it.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "ddp/rdzv/rendezvous.hpp"
#include "ddp/store/store.hpp"

namespace ddp::agent {

class StartupTimes {
 public:
  using Clock = std::chrono::steady_clock;

  explicit StartupTimes(boost::asio::io_context& io) : io_(io) {}
  ~StartupTimes();  // cancels the watch: no callback runs after it
  StartupTimes(const StartupTimes&) = delete;
  StartupTimes& operator=(const StartupTimes&) = delete;

  // A new attempt's rendezvous begins: forgets the previous attempt's times
  // and stops watching its workers.
  void rendezvous_started();
  // The round closed: watches `store` for this node's workers' first steps
  // (none when `store` is null); `on_first_step` runs on the io thread once
  // every local worker has reported, and never before spawned().
  void rendezvous_done(const rdzv::RendezvousResult& round, int local_world_size,
                       std::shared_ptr<store::Store> store, std::function<void()> on_first_step);
  // Every worker of the group was started. When every local worker has
  // already stepped, posts `on_first_step` so that it runs after the caller.
  void spawned();
  // Marks global `rank`'s first step (a watch event, or a test). True when it
  // completes the node's first step after spawned().
  bool first_step(std::int64_t rank);

  // {"rendezvous_s", "spawn_s", "first_step_s", "first_step_ranks"}; null for
  // what has not happened (yet) in this attempt.
  nlohmann::json fields() const;

 private:
  static nlohmann::json seconds(std::optional<Clock::time_point> from, std::optional<Clock::time_point> to);

  boost::asio::io_context& io_;
  std::uint64_t attempt_ = 0;  // drops watch events of earlier attempts
  std::optional<Clock::time_point> started_, closed_, spawned_, first_step_;
  std::int64_t rank_offset_ = 0;
  int local_world_size_ = 0;
  std::set<std::int64_t> reported_;
  std::function<void()> on_first_step_;
  std::unique_ptr<store::WatchHandle> watch_;
};

}  // namespace ddp::agent
