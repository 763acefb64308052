// What a store server knows of the ddprun jobs in it, derived from the keys
// the agents and rendezvous handlers already write (docs/rendezvous.md, "Key
// layout") and from what the server saw happen to them (JobLog): the rows of
// `ddp-store jobs`, the daemon's status page and its per-job metrics.
//
// Every string here is as stored: a run id, a host name or a failure text is
// whatever a client wrote. Whoever shows one escapes it for where it goes
// (ddp::printable for a terminal, HTML escaping for the page).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddp::store {

// forming: round 0 has not closed; running: the current round closed and
// runs; restarting: a later round is forming, or the current one ended and the
// next has not formed; succeeded: every node's workers succeeded; failed: the
// job was closed (restarts spent, a config mistake, nodes excluded); stopped:
// closed by an agent stopped with a signal, or every member left without
// closing it (all agents killed).
enum class JobState : std::uint8_t { kForming, kRunning, kRestarting, kSucceeded, kFailed, kStopped };
inline constexpr JobState kJobStates[] = {JobState::kForming,   JobState::kRunning, JobState::kRestarting,
                                          JobState::kSucceeded, JobState::kFailed,  JobState::kStopped};
const char* job_state_name(JobState s);

// One worker of a node, from the node's status record.
struct RankStatus {
  std::int64_t rank = -1;
  std::string state;            // starting, running, succeeded, failed
  double heartbeat_age_s = -1;  // as of the record's write, aged to the scan; -1: never beat
  double step_s = -1;           // latest step time; -1: none yet
  std::int64_t steps = 0;
  std::string section;  // its current liveness section
};

// One node, from its status record (/<run>/agent/status/<node_id>).
struct NodeStatus {
  std::string node_id;  // from the key
  std::string host;
  std::string state;  // as the record says: running, stopping, unhealthy: <why>, succeeded, ...
  std::int64_t round = -1;
  std::int64_t group_rank = -1;
  std::int64_t group_world_size = 0;
  std::int64_t rank_first = -1;
  std::int64_t rank_last = -1;
  std::int64_t restarts = -1;
  std::int64_t max_restarts = -1;
  double updated = 0;             // when the agent wrote it (seconds since the epoch, its clock)
  std::string problem;            // why the record could not be read; empty when it was
  std::vector<RankStatus> ranks;  // filled for the nodes of the page asked for only
};

// A node's latest failure report (/<run>/agent/failure/<node_id>): the root
// cause of its failed attempt, and for a hang the stack it was killed in.
struct FailureInfo {
  std::string node_id;
  std::string host;
  std::int64_t round = -1;
  std::int64_t rank = -1;
  double time = 0;                       // when the agent saw the worker end
  std::string summary;                   // one line: "rank 3 on gpu2: exit code 1: ValueError: bad batch"
  std::string hang;                      // "no heartbeat for 5.0 s" for a worker killed hung; empty otherwise
  std::vector<std::string> frames;       // its stack, innermost first
  std::vector<std::string> other_ranks;  // "[rank 0] waiting in: ..."
  std::string traceback;                 // the worker's error file's traceback (its end)
  std::vector<std::string> stderr_tail;  // its last stderr lines
};

struct StragglerInfo {
  std::int64_t rank = -1;
  std::string node;
  std::string host;
  double step_s = -1;
  double median_s = -1;
  double factor = -1;
  std::int64_t steps = 0;
};

// Something the server saw happen to a job (formed, restarted, failed, ...).
struct JobEvent {
  double time = 0;  // seconds since the epoch, the server's clock
  std::string text;
};

// One row of the job list.
struct JobSummary {
  std::string run_id;
  std::string backend;  // "c10d" or "static" (etcd jobs live in etcd, not here)
  JobState state = JobState::kForming;
  std::string nnodes;          // "1:4" (c10d's /rdzv/nnodes) or "2" (static); empty when unknown
  std::int64_t round = 0;      // the current round (0 before the first restart)
  std::int64_t nodes = 0;      // members of the current round (node records held by a live lease)
  std::int64_t ranks = 0;      // workers of the current round
  std::int64_t unhealthy = 0;  // status records that read unhealthy
  std::int64_t spares = 0;     // hot spares waiting beside the current round
  std::int64_t excluded = 0;   // hosts kept out (--max_node_failures)
  std::int64_t status_records = 0;
  std::int64_t restarts = -1;       // restarts used, the largest any node reports; -1: no record yet
  std::int64_t max_restarts = -1;   // -1: no record yet
  std::int64_t stragglers = -1;     // ranks named in the current round; -1: no verdict yet
  double step_s = -1;               // median of the running ranks' latest step times; -1: none
  double heartbeat_age_max_s = -1;  // the oldest running rank's time since its heartbeat; -1: none
  double first_seen = 0;            // when the server first saw a key of it (epoch s; 0: unknown)
  double last_failure_time = 0;     // 0: no failure known
  std::string last_failure;         // one line; empty: none
  std::string closed_reason;        // /<run>/rdzv/closed, when the job was closed
};

// One job in full, for its page.
struct JobDetail {
  JobSummary summary;
  std::vector<NodeStatus> nodes;  // one page, current round first, then by group rank
  std::size_t nodes_total = 0;
  std::size_t node_offset = 0;
  std::vector<std::pair<std::string, std::string>> members;  // current round: group rank, host (one page)
  std::vector<FailureInfo> failures;                         // newest first
  std::size_t failures_total = 0;
  std::vector<StragglerInfo> stragglers;
  std::vector<std::pair<std::string, std::string>> spares;    // node id, host
  std::vector<std::pair<std::string, std::string>> excluded;  // host, why
  std::vector<JobEvent> events;                               // oldest first
};

struct JobQuery {
  std::string run_id;   // empty: every job (summaries only)
  bool detail = false;  // with run_id: its JobDetail too
  std::size_t node_offset = 0;
  std::size_t node_limit = 100;
};

struct JobsReport {
  std::vector<JobSummary> jobs;  // by run id
  bool truncated = false;        // more jobs than a report holds (kMaxJobs)
  std::optional<JobDetail> detail;
  double taken_at = 0;  // when the scan ended (epoch s)
};

// The most jobs one report lists, the failure reports one detail keeps, and
// the nodes a detail page can hold: bounds on what a request makes the server
// build, whatever the store holds.
inline constexpr std::size_t kMaxJobs = 100000;
inline constexpr std::size_t kMaxFailuresShown = 16;
inline constexpr std::size_t kMaxNodesPerPage = 1000;

// A summary as JSON (the value of each item of the kJobs reply, and of
// /api/jobs): strings as stored, bytes that are not UTF-8 replaced.
std::string to_json(const JobSummary& job);

}  // namespace ddp::store
