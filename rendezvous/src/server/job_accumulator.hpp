// Derives one job's row (and, when asked, its detail) from its keys, fed one
// at a time in key order: the keys of a job are contiguous in the ordered key
// space, and within it "/<run>/agent/..." comes before "/<run>/rdzv/...", and
// "rdzv/round" (the round pointer) before "rdzv/round_<k>/...". What it keeps
// between keys is small: counters, the current and neighbouring rounds'
// facts, and in detail mode one compact entry per node (no ranks) plus the
// failure reports it shows. Worker keys (/<run>/worker/) are never fed.
//
// Thread-safety: none.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddp/store/job_report.hpp"
#include "job_log.hpp"

namespace ddp::store::server {

class JobAccumulator {
 public:
  // `detail`: the query whose JobDetail to build too; nullptr for a row only.
  // `now`: seconds since the epoch, for ages.
  JobAccumulator(std::string run_id, const JobQuery* detail, double now);

  // One key of the job: its area ("agent", "rdzv"), the rest after
  // "/<run>/<area>/", its value, and whether a lease holds it.
  void add(std::string_view area, std::string_view rest, std::string_view value, bool leased);
  // Whether what was fed makes a ddprun job: a rendezvous key or a status record.
  bool is_job() const { return rdzv_keys_ > 0 || summary_.status_records > 0; }

  // The row, with what the server saw of the job (`life`, may be null).
  JobSummary summary(const JobLife* life);
  // The detail (after summary()): `lookup` reads a key's value again, for the
  // ranks of the nodes on the page asked for.
  JobDetail detail(const JobLife* life,
                   const std::function<std::optional<std::string>(const std::string&)>& lookup);

 private:
  struct RoundFacts {
    std::int64_t members = 0;
    std::int64_t member_nproc = 0;
    std::optional<std::string> closed;
    std::optional<std::string> ended;
    bool done = false;
    std::int64_t spares = 0;
    std::optional<std::int64_t> static_nodes;                      // R/nnodes of a static round
    std::vector<std::pair<std::string, std::string>> member_list;  // detail: group rank, host
    std::vector<std::pair<std::string, std::string>> spare_list;   // detail: node id, host
  };

  void add_agent(std::string_view rest, std::string_view value);
  void add_rdzv(std::string_view rest, std::string_view value, bool leased);
  void add_round(std::int64_t round, std::string_view what, std::string_view value, bool leased);
  RoundFacts* round_facts(std::int64_t round);

  std::string run_id_;
  const JobQuery* query_;
  double now_;
  JobSummary summary_;
  std::int64_t rdzv_keys_ = 0;
  std::optional<std::int64_t> pointer_;
  bool is_static_ = false;
  // Rounds around the current one (keep_rounds 0 keeps every round's keys).
  std::map<std::int64_t, RoundFacts> rounds_;
  std::int64_t succeeded_records_ = 0;
  std::vector<double> steps_;
  std::optional<std::int64_t> verdict_round_;
  std::int64_t verdict_count_ = 0;
  std::vector<StragglerInfo> verdict_ranks_;
  double newest_failure_ = -1;
  // Detail only.
  std::vector<NodeStatus> nodes_;
  std::vector<FailureInfo> failures_;
  std::size_t failures_total_ = 0;
  std::vector<std::pair<std::string, std::string>> excluded_;
};

}  // namespace ddp::store::server
