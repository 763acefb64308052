#include "request_metrics.hpp"

#include <charconv>
#include <nlohmann/json.hpp>
#include <string_view>

#include "ddp/common/json_input.hpp"
#include "ddp/store/job_keys.hpp"

namespace ddp::store::server {

namespace {

// Whether an agent's status record reads unhealthy: its "state" is
// "unhealthy: <reason>" while its node fails its health checks and stays out
// (docs/agent.md, "Health checks"). The text is searched first, so a scrape
// parses only the few records that can be unhealthy, not every node's.
bool reads_unhealthy(std::string_view record) {
  constexpr std::string_view kUnhealthy = "unhealthy";
  if (record.find(kUnhealthy) == std::string_view::npos) return false;
  // Anyone with access to the store can write a record: bounded before it is built.
  const auto j = try_parse_json(record, json_input::kStatusRecord);
  const auto state = j.is_object() ? j.find("state") : j.end();
  return state != j.end() && state->is_string() &&
         state->get_ref<const std::string&>().starts_with(kUnhealthy);
}

// The ranks a stragglers verdict names, and the round it is about; nullopt
// for a value that is not a verdict.
struct Verdict {
  std::int64_t round = 0;
  std::int64_t named = 0;
};
std::optional<Verdict> verdict_of(std::string_view value) {
  const auto j = try_parse_json(value, json_input::kStatusRecord);
  if (!j.is_object()) return std::nullopt;
  const auto round = j.find("round");
  const auto list = j.find("stragglers");
  if (round == j.end() || !round->is_number_integer() || list == j.end() || !list->is_array()) {
    return std::nullopt;
  }
  return Verdict{round->get<std::int64_t>(), static_cast<std::int64_t>(list->size())};
}

}  // namespace

void RequestMetrics::record(Op op, std::chrono::nanoseconds took) {
  const auto index = static_cast<std::size_t>(op);
  if (index < by_op_.size()) ++by_op_[index];
  const auto us = took.count() / 1000;
  std::size_t b = 0;
  while (b < kBucketsUs.size() && us > kBucketsUs[b]) ++b;
  ++buckets_[b];
  sum_ns_ += took.count();
  ++count_;
}

void RequestMetrics::append_to(std::map<std::string, std::int64_t>& out) const {
  for (std::size_t i = 1; i < by_op_.size(); ++i) {
    out[std::string("requests.") + op_name(static_cast<Op>(i))] = by_op_[i];
  }
  std::int64_t cumulative = 0;
  for (std::size_t b = 0; b < kBucketsUs.size(); ++b) {
    cumulative += buckets_[b];
    out["latency_le_us." + std::to_string(kBucketsUs[b])] = cumulative;
  }
  out["latency_le_us.+Inf"] = cumulative + buckets_.back();
  out["latency_sum_ns"] = sum_ns_;
  out["latency_count"] = count_;
}

void append_rendezvous_rounds(const KvState& kv, std::map<std::string, std::int64_t>& out) {
  for (const auto& [key, entry] : kv.entries()) {
    const auto run = store::keys::run_of_round_pointer(key);
    if (!run) continue;
    std::int64_t round = 0;
    const auto* first = entry.value.data();
    const auto* last = first + entry.value.size();
    if (auto [p, ec] = std::from_chars(first, last, round); ec != std::errc() || p != last) continue;
    out["rdzv_round." + std::string(*run)] = round;
  }
  // Spares, exclusions, unhealthy nodes and stragglers: counted once the
  // rounds above are known.
  const auto current_round = [&](std::string_view run) -> std::optional<std::int64_t> {
    const auto it = out.find("rdzv_round." + std::string(run));
    if (it == out.end()) return std::nullopt;
    return it->second;
  };
  for (const auto& [key, entry] : kv.entries()) {
    if (const auto run = store::keys::run_of_excluded(key)) {
      ++out["rdzv_excluded." + std::string(*run)];
    } else if (const auto spare = store::keys::spare_of(key)) {
      if (current_round(spare->run) == spare->round) ++out["rdzv_spares." + std::string(spare->run)];
    } else if (const auto node_run = store::keys::run_of_status_record(key)) {
      // A job with status records has the series, at 0 when every node is healthy.
      auto& unhealthy = out["rdzv_unhealthy." + std::string(*node_run)];
      if (reads_unhealthy(entry.value)) ++unhealthy;
    } else if (const auto verdict_run = store::keys::run_of_stragglers(key)) {
      const auto v = verdict_of(entry.value);
      if (!v) continue;
      // An older round's verdict names ranks of workers that are gone.
      const auto round = current_round(*verdict_run);
      out["rdzv_stragglers." + std::string(*verdict_run)] = !round || *round == v->round ? v->named : 0;
    }
  }
}

}  // namespace ddp::store::server
