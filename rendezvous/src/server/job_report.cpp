#include "ddp/store/job_report.hpp"

#include <nlohmann/json.hpp>

namespace ddp::store {

const char* job_state_name(JobState s) {
  switch (s) {
    case JobState::kForming:
      return "forming";
    case JobState::kRunning:
      return "running";
    case JobState::kRestarting:
      return "restarting";
    case JobState::kSucceeded:
      return "succeeded";
    case JobState::kFailed:
      return "failed";
    case JobState::kStopped:
      return "stopped";
  }
  return "unknown";
}

std::string to_json(const JobSummary& j) {
  const auto or_null = [](auto v, auto none) {
    return v == none ? nlohmann::json(nullptr) : nlohmann::json(v);
  };
  nlohmann::json o = {
      {"run_id", j.run_id},
      {"backend", j.backend},
      {"state", job_state_name(j.state)},
      {"nnodes", j.nnodes},
      {"round", j.round},
      {"nodes", j.nodes},
      {"ranks", j.ranks},
      {"unhealthy", j.unhealthy},
      {"spares", j.spares},
      {"excluded", j.excluded},
      {"status_records", j.status_records},
      {"restarts", or_null(j.restarts, std::int64_t{-1})},
      {"max_restarts", or_null(j.max_restarts, std::int64_t{-1})},
      {"stragglers", or_null(j.stragglers, std::int64_t{-1})},
      {"step_s", or_null(j.step_s, -1.0)},
      {"heartbeat_age_max_s", or_null(j.heartbeat_age_max_s, -1.0)},
      {"first_seen", or_null(j.first_seen, 0.0)},
      {"last_failure_time", or_null(j.last_failure_time, 0.0)},
      {"last_failure", j.last_failure},
      {"closed_reason", j.closed_reason},
  };
  // Strings are as stored: a byte that is not UTF-8 becomes U+FFFD rather than
  // failing the whole listing.
  return o.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ddp::store
