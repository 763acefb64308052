#include "job_status.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "ddp/common/error.hpp"
#include "ddp/common/json_input.hpp"
#include "ddp/common/printable.hpp"
#include "ddp/store/job_keys.hpp"

namespace ddp::store_cli {
namespace {

// An integer field, for sorting rows: 0 when absent or not an integer (a
// float's conversion is undefined when it is out of the integer's range).
std::int64_t int_field(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<std::int64_t>() : 0;
}

std::string str(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) return "?";
  const auto& v = j.at(key);
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// "running 1234,1235; failed 1236": worker states with their pids, grouped.
std::string workers_cell(const nlohmann::json& workers) {
  std::map<std::string, std::string> by_state;
  if (workers.is_array()) {
    for (const auto& w : workers) {
      auto& pids = by_state[str(w, "state")];
      pids += (pids.empty() ? "" : ",") + str(w, "pid");
    }
  }
  std::string out;
  for (const auto& [state, pids] : by_state) out += (out.empty() ? "" : "; ") + state + " " + pids;
  return out.empty() ? "-" : out;
}

// Keys under /<id>/worker/ by round ("round_<k>/..."): the torch workers'
// keys (through each agent's torch store proxy) and the C++ SDK's. Counted by
// the server, values unread (a job of 100,000 workers holds as many keys); a
// daemon older than the count request closes the connection at it, and the
// keys are then listed as before.
std::map<std::int64_t, std::size_t, std::greater<>> worker_keys_by_round(store::Store& store,
                                                                         const std::string& prefix) {
  std::vector<store::ChildCount> children;
  try {
    children = store.count_children(prefix);
  } catch (const NetworkError&) {
    children = store.Store::count_children(prefix);
  }
  std::map<std::int64_t, std::size_t, std::greater<>> out;
  for (const auto& c : children) {
    // A key not written by ddprun has no round: `ddp-store list` still shows it.
    if (const auto round = store::keys::worker_round_of(c.child))
      out[*round] += static_cast<std::size_t>(c.keys);
  }
  return out;
}

// "rdzv 0.012s spawn 0.004s step 1.350s" for the node's current attempt
// (docs/agent.md, "Startup times"); "-" for what has not happened yet.
std::string startup_cell(const nlohmann::json& s) {
  if (!s.is_object()) return "-";
  const auto part = [&](const char* name, const char* key) {
    char buf[64];
    const auto it = s.find(key);
    if (it == s.end() || !it->is_number()) return std::string(name) + " -";
    std::snprintf(buf, sizeof(buf), "%s %.3fs", name, it->get<double>());
    return std::string(buf);
  };
  return part("rdzv", "rendezvous_s") + " " + part("spawn", "spawn_s") + " " + part("step", "first_step_s");
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// "r0 0.4s step, r1 12.3s step": each worker's time since its latest
// heartbeat (docs/agent-liveness.md, "Heartbeats and sections"), aged by how long ago
// the record was written; "-" when no worker beats.
std::string heartbeat_cell(const nlohmann::json& workers, double updated) {
  std::string out;
  if (!workers.is_array()) return "-";
  const double since = std::max(0.0, now_s() - updated);
  for (const auto& w : workers) {
    const auto it = w.find("heartbeat_age_s");
    if (it == w.end() || !it->is_number()) continue;
    char buf[64];
    std::snprintf(buf, sizeof(buf), "r%s %.1fs", str(w, "rank").c_str(), it->get<double>() + since);
    if (!out.empty()) out.append(", ");
    out.append(buf);
    if (const auto sec = w.find("section"); sec != w.end() && sec->is_string()) {
      out.append(" ").append(sec->get<std::string>());
    }
  }
  return out.empty() ? "-" : out;
}

// "8-15"; for a node that holds no ranks yet (unhealthy before its first
// round) the workers it would start: "? (4 local)".
std::string ranks_cell(const nlohmann::json& j) {
  if (!j.contains("rank_first") && j.contains("local_world_size")) {
    return "? (" + str(j, "local_world_size") + " local)";
  }
  return str(j, "rank_first") + "-" + str(j, "rank_last");
}

std::string age(double updated) {
  // "updated" is whatever the record says: clamped before the conversion, which
  // is undefined for a double out of the integer's range.
  const double secs = std::clamp(now_s() - updated, 0.0, 1e15);
  return std::to_string(static_cast<long long>(secs)) + "s ago";
}

// The ranks the nodes' records name as stragglers (docs/agent-diagnosis.md,
// "Stragglers"), each with its numbers from the newest round that names it
// and the nodes whose records do: every node shows the job-wide list.
void print_stragglers(const std::vector<store::KeyValue>& records) {
  struct Named {
    std::int64_t round = -1;
    nlohmann::json numbers;
    std::string seen_by;
  };
  std::map<std::int64_t, Named> by_rank;
  for (const auto& kv : records) {
    const auto j = try_parse_json(kv.value, json_input::kStatusRecord);
    if (!j.is_object() || !j.contains("stragglers") || !j.at("stragglers").is_array()) continue;
    const std::int64_t round = int_field(j, "round");
    for (const auto& s : j.at("stragglers")) {
      if (!s.is_object()) continue;
      auto& n = by_rank[int_field(s, "rank")];
      if (round > n.round) n = Named{round, s, ""};
      if (round == n.round) n.seen_by += (n.seen_by.empty() ? "" : ",") + str(j, "node");
    }
  }
  if (by_rank.empty()) return;
  std::printf("\n%-9s  %-16s  %-8s  %-8s  %-6s  %-5s  %s\n", "STRAGGLER", "NODE", "STEP_S", "MEDIAN_S",
              "FACTOR", "STEPS", "SEEN_BY");
  const auto num = [](const nlohmann::json& s, const char* key, const char* fmt) {
    const auto it = s.find(key);
    if (it == s.end() || !it->is_number()) return std::string("?");
    char buf[64];
    std::snprintf(buf, sizeof(buf), fmt, it->get<double>());
    return std::string(buf);
  };
  for (const auto& [rank, n] : by_rank) {
    std::printf("%-9s  %-16s  %-8s  %-8s  %-6s  %-5s  %s\n", ("rank " + std::to_string(rank)).c_str(),
                printable(str(n.numbers, "node")).c_str(), num(n.numbers, "step_s", "%.3f").c_str(),
                num(n.numbers, "median_s", "%.3f").c_str(), num(n.numbers, "factor", "%.1fx").c_str(),
                printable(str(n.numbers, "steps")).c_str(), printable(n.seen_by).c_str());
  }
}

}  // namespace

NodeRow node_row(std::string_view record) {
  const auto j = parse_json(record, json_input::kStatusRecord);
  NodeRow row;
  row.round = int_field(j, "round");
  row.group_rank = int_field(j, "group_rank");
  row.cells = {str(j, "node"),
               str(j, "host"),
               str(j, "group_rank") + "/" + str(j, "group_world_size"),
               ranks_cell(j),
               str(j, "round"),
               str(j, "restart_count") + "/" + str(j, "max_restarts"),
               str(j, "state"),
               workers_cell(j.value("workers", nlohmann::json::array())),
               startup_cell(j.value("startup", nlohmann::json())),
               heartbeat_cell(j.value("workers", nlohmann::json::array()), j.value("updated", 0.0)),
               age(j.value("updated", 0.0))};
  // A table for people: always escaped, whatever --escape says, and so
  // measured by what the terminal shows.
  for (auto& cell : row.cells) cell = printable(cell);
  return row;
}

namespace {

// "SPARES" (the hot spares waiting beside the job's current round) and
// "EXCLUDED" (hosts kept out of its later rounds): from the rendezvous keys,
// since a spare has no status record before it is admitted.
int print_spares_and_excluded(store::Store& store, const std::string& rdzv_id) {
  int shown = 0;
  const auto round = store::keys::counter_value(store.try_get(store::keys::round_pointer_key(rdzv_id)));
  const std::string dir = store::keys::spares_prefix(store::keys::round_prefix(rdzv_id, round));
  const auto spares = store.list(dir).kvs;
  if (!spares.empty()) {
    std::printf("\nSPARES (waiting beside round %lld)\n", static_cast<long long>(round));
    for (const auto& kv : spares) {
      std::string host = "?";
      std::string nproc = "?";
      try {
        const auto j = parse_json(kv.value, json_input::kRendezvousRecord);
        host = str(j, "host");
        nproc = str(j, "nproc");
      } catch (const std::exception&) {
      }
      std::printf("%s  %s  %s workers\n", printable(kv.key.substr(dir.size())).c_str(),
                  printable(host).c_str(), printable(nproc).c_str());
      ++shown;
    }
  }
  const std::string ex = store::keys::excluded_prefix(rdzv_id);
  const auto excluded = store.list(ex).kvs;
  if (!excluded.empty()) {
    std::printf("\nEXCLUDED (ddp-store excluded readmit --rdzv_id %s HOST)\n", printable(rdzv_id).c_str());
    for (const auto& kv : excluded) {
      std::printf("%s  %s\n", printable(kv.key.substr(ex.size())).c_str(), printable(kv.value).c_str());
      ++shown;
    }
  }
  return shown;
}

}  // namespace

void print_columns(const std::vector<std::string>& header,
                   const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& r : rows) width[c] = std::max(width[c], r[c].size());
  }
  const auto print = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      line += cells[c];
      if (c + 1 < cells.size()) line += std::string(width[c] - cells[c].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  };
  print(header);
  for (const auto& r : rows) print(r);
}

int print_job_status(store::Store& store, const std::string& rdzv_id) {
  const std::string prefix = store::keys::agent_status_prefix(rdzv_id);
  const std::vector<std::string> header = {"NODE",    "HOST",      "GROUP_RANK", "RANKS",
                                           "ROUND",   "RESTARTS",  "STATE",      "WORKERS",
                                           "STARTUP", "HEARTBEAT", "UPDATED"};
  std::vector<NodeRow> rows;
  for (const auto& kv : store.list(prefix).kvs) {
    std::string problem;
    try {
      rows.push_back(node_row(kv.value));
      continue;
    } catch (const JsonError& e) {
      problem = e.what();
    } catch (const nlohmann::json::exception& e) {
      problem = std::string("has a field of the wrong type (") + e.what() + ")";
    }
    // A record this version cannot read still shows up, so nothing hides; the
    // line on stderr says why, and the other rows are printed as usual.
    std::fprintf(stderr, "ddp-store: record %s %s; shown as unreadable\n", printable(kv.key).c_str(),
                 printable(problem).c_str());
    NodeRow row;
    row.cells = {
        printable(kv.key.substr(prefix.size())), "?", "?", "?", "?", "?", "unreadable", "-", "-", "-", "-"};
    rows.push_back(std::move(row));
  }
  if (rows.empty()) {
    if (print_spares_and_excluded(store, rdzv_id) > 0) return 0;
    std::fprintf(stderr, "ddp-store: no ddprun node of job '%s' in this store (keys under %s)\n",
                 printable(rdzv_id).c_str(), printable(prefix).c_str());
    return 1;
  }
  // The current round first; within it, by group rank.
  std::sort(rows.begin(), rows.end(), [](const NodeRow& a, const NodeRow& b) {
    return a.round != b.round ? a.round > b.round : a.group_rank < b.group_rank;
  });
  std::vector<std::vector<std::string>> cells;
  cells.reserve(rows.size());
  for (auto& r : rows) cells.push_back(std::move(r.cells));
  print_columns(header, cells);
  print_stragglers(store.list(prefix).kvs);
  print_spares_and_excluded(store, rdzv_id);

  const std::string worker_prefix = store::keys::worker_root(rdzv_id);
  const auto rounds = worker_keys_by_round(store, worker_prefix);
  if (!rounds.empty()) {
    std::printf("\nROUND  WORKER_KEYS  PREFIX\n");
    for (const auto& [round, keys] : rounds) {
      const std::string round_prefix = store::keys::worker_prefix(rdzv_id, round);
      std::printf("%-5lld  %-11zu  %s\n", static_cast<long long>(round), keys,
                  printable(round_prefix).c_str());
    }
  }
  return 0;
}

}  // namespace ddp::store_cli
