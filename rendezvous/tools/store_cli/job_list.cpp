#include "job_list.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "ddp/common/json_input.hpp"
#include "ddp/common/printable.hpp"
#include "job_status.hpp"
#include "store_commands.hpp"

namespace ddp::store_cli {
namespace {

using nlohmann::json;

// The last failure shown in one table row: enough to tell what failed.
constexpr std::size_t kFailureWidth = 100;

std::int64_t int_or(const json& j, const char* key, std::int64_t none) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<std::int64_t>() : none;
}

double num_or(const json& j, const char* key, double none) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : none;
}

std::string str(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string count(std::int64_t v) { return v < 0 ? "-" : std::to_string(v); }

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string age_text(double s) {
  if (!(s >= 0) || s > 1e10) return "-";
  const auto t = static_cast<long long>(s);
  char buf[32];
  if (t < 60) {
    std::snprintf(buf, sizeof buf, "%llds", t);
  } else if (t < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", t / 60, t % 60);
  } else if (t < 86400) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", t / 3600, t % 3600 / 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lldd%02lldh", t / 86400, t % 86400 / 3600);
  }
  return buf;
}

std::vector<std::vector<std::string>> job_rows(const std::vector<store::KeyValue>& jobs, double now) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& kv : jobs) {
    const auto j = try_parse_json(kv.value, json_input::kStatusRecord);
    if (!j.is_object()) {
      rows.push_back({printable(kv.key), "?", "unreadable", "?", "?", "?", "?", "?", "?", "?", "?", "-"});
      continue;
    }
    const auto first_seen = num_or(j, "first_seen", 0);
    std::string failure = str(j, "last_failure");
    if (!failure.empty()) {
      failure = printable(failure);
      if (failure.size() > kFailureWidth) failure = failure.substr(0, kFailureWidth - 3) + "...";
      if (const auto t = num_or(j, "last_failure_time", 0); t > 0)
        failure += " (" + age_text(now - t) + " ago)";
    }
    const auto restarts = int_or(j, "restarts", -1);
    const auto max_restarts = int_or(j, "max_restarts", -1);
    rows.push_back({printable(kv.key), printable(str(j, "backend")), printable(str(j, "state")),
                    count(int_or(j, "nodes", -1)), count(int_or(j, "unhealthy", -1)),
                    count(int_or(j, "spares", -1)), count(int_or(j, "excluded", -1)),
                    count(int_or(j, "ranks", -1)), count(int_or(j, "round", -1)),
                    restarts < 0 ? "-" : count(restarts) + "/" + count(max_restarts),
                    first_seen > 0 ? age_text(now - first_seen) : "-", failure.empty() ? "-" : failure});
  }
  return rows;
}

int print_jobs(store::TcpStore& store, const std::string& rdzv_id, bool as_json) {
  bool truncated = false;
  const auto jobs = store.jobs(rdzv_id, &truncated);
  if (!rdzv_id.empty() && jobs.empty()) {
    std::fprintf(stderr, "ddp-store: no ddprun job '%s' in this store\n", printable(rdzv_id).c_str());
    return kExitNotFound;
  }
  if (truncated) {
    std::fprintf(stderr,
                 "ddp-store: the daemon holds more jobs than it lists at once; these are the first %zu\n",
                 jobs.size());
  }
  if (as_json) {
    json out = json::array();
    for (const auto& kv : jobs) {
      auto j = try_parse_json(kv.value, json_input::kStatusRecord);
      out.push_back(j.is_object() ? std::move(j) : json{{"run_id", kv.key}, {"state", "unreadable"}});
    }
    // JSON escapes every control character; bytes that are not UTF-8 become U+FFFD.
    std::printf("%s\n", out.dump(2, ' ', false, json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  const std::vector<std::string> header = {"RUN_ID",    "BACKEND",  "STATE",    "NODES",
                                           "UNHEALTHY", "SPARES",   "EXCLUDED", "RANKS",
                                           "ROUND",     "RESTARTS", "AGE",      "LAST_FAILURE"};
  const auto rows = job_rows(jobs, now_s());
  print_columns(header, rows);
  return kExitOk;
}

}  // namespace ddp::store_cli
