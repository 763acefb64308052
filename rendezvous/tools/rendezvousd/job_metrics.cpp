// The per-job series of /metrics, from a job listing (StoreServer::jobs).
#include <sstream>

#include "ddp/common/printable.hpp"
#include "status_page.hpp"

namespace ddp::rendezvousd {
namespace {

// A label value: the run id escaped as everywhere else (ddp::printable, so a
// control character reads "\x1b"), then the exposition format's own escapes.
std::string label(const std::string& v) {
  std::string out;
  for (char c : printable(v)) {
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string render_job_metrics(const store::JobsReport& report) {
  std::ostringstream o;
  o.precision(10);
  const auto head = [&](const char* name, const char* help) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n";
  };
  head("ddp_rendezvous_jobs", "ddprun jobs on the daemon, by state");
  for (const auto state : store::kJobStates) {
    std::int64_t n = 0;
    for (const auto& j : report.jobs) n += j.state == state ? 1 : 0;
    o << "ddp_rendezvous_jobs{state=\"" << store::job_state_name(state) << "\"} " << n << "\n";
  }
  // One gauge per job; `value` returns false to leave the job's series out.
  const auto per_job = [&](const char* name, const char* help, auto value) {
    head(name, help);
    for (const auto& j : report.jobs) {
      double v = 0;
      if (value(j, v)) o << name << "{run_id=\"" << label(j.run_id) << "\"} " << v << "\n";
    }
  };
  head("ddp_rendezvous_job_state",
       "1 for each job, labelled with its state (forming, running, restarting, succeeded, failed, stopped) "
       "and "
       "backend");
  for (const auto& j : report.jobs) {
    o << "ddp_rendezvous_job_state{run_id=\"" << label(j.run_id) << "\",state=\""
      << store::job_state_name(j.state) << "\",backend=\"" << label(j.backend) << "\"} 1\n";
  }
  per_job("ddp_rendezvous_round", "current rendezvous round of each job (0 until its first restart)",
          [](const store::JobSummary& j, double& v) { return v = static_cast<double>(j.round), true; });
  per_job("ddp_rendezvous_nodes", "nodes holding a place in each job's current round",
          [](const store::JobSummary& j, double& v) { return v = static_cast<double>(j.nodes), true; });
  per_job("ddp_rendezvous_ranks", "workers (ranks) of each job's current round",
          [](const store::JobSummary& j, double& v) { return v = static_cast<double>(j.ranks), true; });
  per_job("ddp_rendezvous_restarts", "restarts each job has used (the most any of its nodes reports)",
          [](const store::JobSummary& j, double& v) {
            return v = static_cast<double>(j.restarts), j.restarts >= 0;
          });
  per_job("ddp_rendezvous_max_restarts", "each job's --max_restarts",
          [](const store::JobSummary& j, double& v) {
            return v = static_cast<double>(j.max_restarts), j.max_restarts >= 0;
          });
  per_job(
      "ddp_rendezvous_last_failure_timestamp_seconds",
      "when each job's latest worker failure happened (seconds since the epoch); absent before any",
      [](const store::JobSummary& j, double& v) { return v = j.last_failure_time, j.last_failure_time > 0; });
  per_job("ddp_rendezvous_step_seconds", "median of each job's running ranks' latest step times",
          [](const store::JobSummary& j, double& v) { return v = j.step_s, j.step_s >= 0; });
  per_job("ddp_rendezvous_heartbeat_age_max_seconds",
          "the longest time since a running rank of each job last heartbeat",
          [](const store::JobSummary& j, double& v) {
            return v = j.heartbeat_age_max_s, j.heartbeat_age_max_s >= 0;
          });
  per_job(
      "ddp_rendezvous_spares", "hot spares waiting beside each job's current round",
      [](const store::JobSummary& j, double& v) { return v = static_cast<double>(j.spares), j.spares > 0; });
  per_job("ddp_rendezvous_excluded", "hosts excluded from each job (--max_node_failures)",
          [](const store::JobSummary& j, double& v) {
            return v = static_cast<double>(j.excluded), j.excluded > 0;
          });
  per_job("ddp_rendezvous_unhealthy_nodes",
          "nodes of each job whose status record reads unhealthy (failing their health checks, not joined)",
          [](const store::JobSummary& j, double& v) {
            return v = static_cast<double>(j.unhealthy), j.status_records > 0;
          });
  per_job("ddp_rendezvous_stragglers", "ranks of each job named as stragglers in its current round",
          [](const store::JobSummary& j, double& v) {
            return v = static_cast<double>(j.stragglers), j.stragglers >= 0;
          });
  return o.str();
}

}  // namespace ddp::rendezvousd
