// Reclaims the keys ddprun jobs leave behind, so that a daemon serving job
// after job stays bounded in memory and on disk:
//   - old rounds: when round R of a job closes (its "/<run>/rdzv/round_R/closed"
//     is written), the rdzv and worker keys of rounds <= R - keep_rounds go;
//   - finished jobs: a job none of whose keys holds a lease (every agent
//     revoked its lease or died) and that wrote nothing for idle_after loses
//     all its keys ("/<run>/rdzv/", "/<run>/worker/", "/<run>/agent/").
// A running job always holds leased node records, so it is never reclaimed.
// Keys that are not ddprun's (store::keys::job_key_of) are never touched.
// This class only decides; the dispatcher deletes what it names, in one
// mutation, which the log and the watchers see like any other deletion.
//
// Thread-safety: none; owned by the server's loop thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ddp/common/deadline.hpp"
#include "kv_state.hpp"
#include "mutation.hpp"

namespace ddp::store::server {

struct ReclaimOptions {
  int keep_rounds = 2;                      // 0: keep every round
  std::chrono::milliseconds idle_after{0};  // 0: never reclaim a job
};

class Reclaimer {
 public:
  explicit Reclaimer(ReclaimOptions options) : options_(options) {}

  // After `m` committed: notes the jobs it wrote to, and returns the keys of
  // the rounds a round close in it made old (in `kv`, which holds `m`).
  std::vector<std::string> on_commit(const Mutation& m, const KvState& kv, Clock::time_point now);
  // The keys of jobs idle past idle_after with no leased key; forgets them.
  // The first call also adopts the jobs found in `kv` (recovered from the
  // data dir), counting their idle time from `now`.
  std::vector<std::string> idle_jobs(const KvState& kv, Clock::time_point now);
  // How often idle_jobs() should run; zero when jobs are never reclaimed.
  std::chrono::milliseconds sweep_period() const;
  std::size_t jobs() const { return last_write_.size(); }
  // The jobs idle_jobs() named since the last call, with their key counts:
  // for the job log, and once their keys are deleted their past events go
  // from the watch history too (EventHistory::forget), so that a daemon
  // running job after job holds no history of the finished ones.
  std::vector<std::pair<std::string, std::size_t>> take_reclaimed_runs() {
    return std::exchange(reclaimed_runs_, {});
  }
  std::int64_t reclaimed_jobs() const { return reclaimed_jobs_; }
  std::int64_t reclaimed_keys() const { return reclaimed_keys_; }
  void count_reclaimed(std::size_t keys) { reclaimed_keys_ += static_cast<std::int64_t>(keys); }

 private:
  ReclaimOptions options_;
  std::unordered_map<std::string, Clock::time_point> last_write_;  // by run id
  bool adopted_ = false;
  std::int64_t reclaimed_jobs_ = 0;
  std::int64_t reclaimed_keys_ = 0;
  std::vector<std::pair<std::string, std::size_t>> reclaimed_runs_;
};

}  // namespace ddp::store::server
