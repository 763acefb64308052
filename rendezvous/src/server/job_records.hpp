// Reading the records ddprun's agents keep in the store (a node's status
// record, its failure report, the stragglers verdict) into job_report.hpp's
// structs. Anyone with access to the store can write these keys, so each is
// parsed within json_input::kStatusRecord and a field of the wrong type reads
// as absent: a hostile record costs its own row, never the scan.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddp/store/job_report.hpp"

namespace ddp::store::server {

// What a status record adds to its job's summary.
struct StatusFigures {
  bool unhealthy = false;
  std::vector<double> step_s;  // running workers' latest step times
  double heartbeat_age_max_s = -1;
};

// A status record's fields, in one parse; `with_ranks` also fills ranks, and
// `figures` (when given) gets what the record adds to the job's summary. Ages
// are as of `now` (the record's heartbeat ages plus the time since it was
// written). On a record that cannot be read, `problem` says why and the rest
// is unset.
NodeStatus read_status_record(std::string_view node_id, std::string_view value, double now, bool with_ranks,
                              StatusFigures* figures = nullptr);

// A failure report; nullopt when the value is not one.
std::optional<FailureInfo> read_failure_record(std::string_view node_id, std::string_view value);

// The stragglers verdict ({"round": R, "stragglers": [...]}); nullopt when
// the value is not one.
struct Verdict {
  std::int64_t round = 0;
  std::vector<StragglerInfo> ranks;
};
std::optional<Verdict> read_verdict(std::string_view value, bool with_ranks);

// A node's rendezvous record ({"id","host","nproc"}): its host and nproc.
struct NodeRecord {
  std::string id;
  std::string host;
  std::int64_t nproc = 0;
};
NodeRecord read_node_record(std::string_view value);

// "<count> <workers> <revision>[ <fence>]" of a closed round: count and workers;
// nullopt for "abort ...", "closed ..." or anything else.
std::optional<std::pair<std::int64_t, std::int64_t>> formed_round(std::string_view closed);

// "<code> <detail>" of R/ctl/ended: the event's name and detail
// ("restart_requested", "node n1 reported a failure: ..."); the codes are
// rdzv::RoundEvent's.
std::pair<std::string, std::string> round_end(std::string_view ended);

// The reason text of R/ctl/ended a node wrote when its workers failed
// (rdzv::kReportedFailure); empty for any other event.
std::string reported_failure(std::string_view ended);

}  // namespace ddp::store::server
