// Store metrics() keys → Prometheus exposition format.
#include <sstream>

#include "ddp/common/parse.hpp"
#include "metrics_http.hpp"

namespace ddp::rendezvousd {
namespace {

// Label values: backslash, quote and newline escaped as the format requires.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

bool starts(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

std::string render_prometheus(const std::map<std::string, std::int64_t>& m) {
  std::ostringstream o;
  auto value = [&](const std::string& k) {
    auto it = m.find(k);
    return it == m.end() ? std::int64_t{0} : it->second;
  };
  auto gauge = [&](const std::string& name, const std::string& help, const std::string& key) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n"
      << name << " " << value(key) << "\n";
  };
  gauge("ddp_store_connections", "open client connections", "connections");
  gauge("ddp_store_keys", "keys in the store", "keys");
  gauge("ddp_store_leases", "live leases", "leases");
  gauge("ddp_store_watches", "active watches", "watches");
  gauge("ddp_store_waiters", "blocked get/wait requests", "waiters");
  gauge("ddp_store_degraded", "1 while the data dir refuses writes (disk full); reads are served",
        "degraded");
  gauge("ddp_store_persist_failures", "log appends and snapshots that failed since start",
        "persist_failures");
  gauge("ddp_store_compaction_failures", "snapshots (compactions) that failed since start",
        "compaction_failures");
  o << "# HELP ddp_store_log_fsyncs_total fdatasyncs of the data dir's log (--fsync=always: one per batch "
       "of writes)\n"
       "# TYPE ddp_store_log_fsyncs_total counter\nddp_store_log_fsyncs_total "
    << value("log_fsyncs") << "\n";
  gauge("ddp_store_revision", "store revision (bumped by every change)", "revision");
  gauge("ddp_store_history_bytes", "key and value bytes of the watch history (capped by history_max_bytes)",
        "history_bytes");
  o << "# HELP ddp_store_auth_failures_total hellos refused for a wrong or missing token\n"
       "# TYPE ddp_store_auth_failures_total counter\nddp_store_auth_failures_total "
    << value("auth_failures") << "\n";
  gauge("ddp_store_unauthenticated_connections", "connections that have not completed their hello",
        "unauthenticated_connections");
  o << "# HELP ddp_store_unauthenticated_closed_total connections closed before their hello to make room "
       "for others\n"
       "# TYPE ddp_store_unauthenticated_closed_total counter\nddp_store_unauthenticated_closed_total "
    << value("unauthenticated_closed") << "\n";

  o << "# HELP ddp_store_requests_total requests handled, by op\n# TYPE ddp_store_requests_total counter\n";
  for (const auto& [k, v] : m) {
    if (starts(k, "requests."))
      o << "ddp_store_requests_total{op=\"" << label(k.substr(9)) << "\"} " << v << "\n";
  }

  o << "# HELP ddp_store_request_duration_seconds time the server loop spent on a request\n"
       "# TYPE ddp_store_request_duration_seconds histogram\n";
  // Buckets in ascending numeric order (the map orders "+Inf" and "10" as text).
  std::map<std::int64_t, std::int64_t> buckets;
  for (const auto& [k, v] : m) {
    if (!starts(k, "latency_le_us.")) continue;
    if (const auto us = parse_int<std::int64_t>(std::string_view(k).substr(14))) buckets[*us] = v;
  }
  for (const auto& [us, v] : buckets) {
    o << "ddp_store_request_duration_seconds_bucket{le=\"" << static_cast<double>(us) / 1e6 << "\"} " << v
      << "\n";
  }
  o << "ddp_store_request_duration_seconds_bucket{le=\"+Inf\"} " << value("latency_le_us.+Inf") << "\n";
  o << "ddp_store_request_duration_seconds_sum " << static_cast<double>(value("latency_sum_ns")) / 1e9
    << "\n";
  o << "ddp_store_request_duration_seconds_count " << value("latency_count") << "\n";

  return o.str();
}

}  // namespace ddp::rendezvousd
