// The life of each ddprun job as the server sees it through the keys written
// to it: formed (round 0 closed: nodes, ranks), restarted (a later round
// closed, and why the one before ended), succeeded (R/done), failed or stopped
// (/<run>/rdzv/closed), reclaimed (the Reclaimer took its keys). With
// `log_lines` each is one info line on the "store.jobs" logger (ddp-rendezvousd
// sets it; an embedded server stays quiet). For every job it also keeps when
// it was first seen, when a failure was last reported, and its last few
// events, for `ddp-store jobs` and the status page.
//
// Bounded: kMaxEvents short events per job, and at most kMaxJobs jobs; a job
// is forgotten when it is reclaimed (or found without keys by prune()).
//
// Thread-safety: none; owned by the dispatcher on the loop thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>

#include "ddp/store/job_report.hpp"
#include "kv_state.hpp"
#include "mutation.hpp"

namespace ddp::store::server {

struct JobLife {
  double first_seen = 0;
  double last_failure_time = 0;
  std::deque<JobEvent> events;
  std::int64_t formed_round = -1;  // the last round logged as formed
  // Static rounds have no close record: nodes are counted as they join.
  std::int64_t static_round = -1;
  std::int64_t static_joined = 0;
  bool ended = false;  // succeeded/failed/stopped logged
};

class JobLog {
 public:
  static constexpr std::size_t kMaxEvents = 12;
  static constexpr std::size_t kMaxEventBytes = 400;
  static constexpr std::size_t kMaxJobs = 100000;

  explicit JobLog(bool log_lines) : log_lines_(log_lines) {}

  // Jobs already in `kv` (recovered from the data dir) count as first seen now.
  void adopt(const KvState& kv, double now);
  // After `m` committed; `kv` holds it.
  void on_commit(const Mutation& m, const KvState& kv, double now);
  // The Reclaimer deleted the job's `keys` keys.
  void reclaimed(const std::string& run, std::size_t keys);
  // Forgets jobs that have no key left in `kv` (deleted by a client).
  void prune(const KvState& kv);
  const JobLife* find(std::string_view run) const;
  std::size_t size() const { return jobs_.size(); }

 private:
  JobLife* life(std::string_view run, double now);
  // `text`: escaped already (what came from outside went through shown()).
  void event(std::string_view run, JobLife& j, double now, std::string text, bool log);
  void on_rdzv_put(std::string_view run, std::string_view rest, const Change& c, const KvState& kv,
                   double now);

  bool log_lines_;
  std::unordered_map<std::string, JobLife> jobs_;
};

// `s` made safe for a log line, the status page and a metric label: control
// characters, invalid UTF-8 and invisible code points escaped
// (ddp::printable), cut at `max` bytes with "..." after.
std::string shown(std::string_view s, std::size_t max = 400);

}  // namespace ddp::store::server
