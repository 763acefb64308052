// One walk over the jobs in the key space, in bounded slices, for a JobQuery:
// each step() reads at most kSliceKeys keys or kSliceBytes of values from where
// the last one stopped, so that the loop thread serves requests between two
// slices however many jobs or nodes the store holds. Keys are read in place
// (no copy of the key space); what a job keeps between slices is its
// JobAccumulator's. The walk is not a snapshot: a key written between two
// slices is seen or not depending on where it falls, as in a paged listing.
// Worker keys ("/<run>/worker/...") are skipped with one seek per job.
//
// Thread-safety: none; runs on the loop thread, which owns `kv` and `log`.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "ddp/store/job_report.hpp"
#include "job_accumulator.hpp"
#include "job_log.hpp"
#include "kv_state.hpp"

namespace ddp::store::server {

class JobScan {
 public:
  // Why these: a slice of status records parses in about a millisecond, so a
  // request arriving meanwhile waits about that long at most.
  static constexpr std::size_t kSliceKeys = 1024;
  static constexpr std::size_t kSliceBytes = 128 * 1024;

  JobScan(JobQuery query, double now);

  // Reads the next slice; true once the walk is done (then take()).
  bool step(const KvState& kv, const JobLog& log);
  JobsReport take() { return std::move(report_); }
  const JobQuery& query() const { return query_; }

 private:
  // Ends the job being read (adds its row, and its detail when asked).
  void finish_job(const KvState& kv, const JobLog& log);

  JobQuery query_;
  double now_;
  std::string prefix_;  // of every key the walk reads: "/" or "/<run>/"
  std::string resume_;  // the next slice starts at the first key not below it
  std::string run_;     // the job being read
  std::unique_ptr<JobAccumulator> job_;
  JobsReport report_;
};

}  // namespace ddp::store::server
