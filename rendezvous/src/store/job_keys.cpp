#include "ddp/store/job_keys.hpp"

#include <limits>

#include "ddp/common/parse.hpp"

namespace ddp::store::keys {
namespace {

constexpr std::string_view kRdzvDir = "/rdzv/";
constexpr std::string_view kRoundPointer = "/rdzv/round";
constexpr std::string_view kRoundDir = "round_";
constexpr std::string_view kNodeDir = "node/";

std::string run_root(const std::string& run_id) { return "/" + run_id; }

}  // namespace

std::optional<std::int64_t> parse_index(std::string_view text) {
  const auto v = parse_int<std::int64_t>(text);
  return v && *v >= 0 ? v : std::nullopt;
}

std::int64_t index_or_none(std::string_view text) { return parse_index(text).value_or(kNoIndex); }

std::int64_t counter_value(const std::optional<std::string>& value) {
  return value ? parse_index(*value).value_or(0) : 0;
}

std::string rdzv_prefix(const std::string& run_id) { return run_root(run_id) + std::string(kRdzvDir); }

std::string round_pointer_key(const std::string& run_id) {
  return run_root(run_id) + std::string(kRoundPointer);
}

std::string round_prefix(const std::string& run_id, std::int64_t round) {
  return rdzv_prefix(run_id) + std::string(kRoundDir) + std::to_string(round) + "/";
}

std::string nodes_prefix(const std::string& round_prefix) { return round_prefix + std::string(kNodeDir); }

std::string node_key(const std::string& round_prefix, std::int64_t index) {
  return nodes_prefix(round_prefix) + std::to_string(index);
}

std::string joining_prefix(const std::string& round_prefix) { return round_prefix + "joining/"; }

std::string joining_key(const std::string& round_prefix, const std::string& node_id) {
  return joining_prefix(round_prefix) + node_id;
}

std::string spares_prefix(const std::string& round_prefix) { return round_prefix + "spare/"; }

std::string spare_key(const std::string& round_prefix, const std::string& node_id) {
  return spares_prefix(round_prefix) + node_id;
}

std::string take_key(const std::string& round_prefix, std::int64_t group_rank, std::int64_t revision) {
  return round_prefix + "take/" + std::to_string(group_rank) + "/" + std::to_string(revision);
}

std::string offers_prefix(const std::string& round_prefix) { return round_prefix + "offer/"; }

std::string grow_ok_key(const std::string& round_prefix) { return round_prefix + "grow_ok"; }

std::string grow_prefix(const std::string& round_prefix) { return round_prefix + "grow/"; }

std::string grow_key(const std::string& round_prefix, std::int64_t group_rank) {
  return grow_prefix(round_prefix) + std::to_string(group_rank);
}

std::string grow_value(const std::string& node_id, int nproc) {
  return node_id + " " + std::to_string(nproc);
}

std::pair<std::string, int> parse_grow_value(const std::string& value) {
  const auto sp = value.rfind(' ');
  if (sp == std::string::npos) return {value, -1};
  const auto n = index_or_none(std::string_view(value).substr(sp + 1));
  if (n < 0 || n > std::numeric_limits<int>::max()) return {value, -1};
  return {value.substr(0, sp), static_cast<int>(n)};
}

std::string grown_key(const std::string& round_prefix) { return round_prefix + "grown"; }

std::string offer_key(const std::string& round_prefix, std::int64_t group_rank, std::int64_t revision) {
  return offers_prefix(round_prefix) + std::to_string(group_rank) + "/" + std::to_string(revision);
}

std::string gone_prefix(const std::string& round_prefix) { return round_prefix + "ctl/gone/"; }

std::string gone_key(const std::string& round_prefix, std::int64_t group_rank) {
  return gone_prefix(round_prefix) + std::to_string(group_rank);
}

std::string excluded_prefix(const std::string& run_id) { return rdzv_prefix(run_id) + "excluded/"; }

std::string excluded_key(const std::string& run_id, const std::string& host) {
  return excluded_prefix(run_id) + host;
}

std::optional<std::int64_t> node_index(std::string_view key, const std::string& round_prefix) {
  const auto prefix = nodes_prefix(round_prefix);
  if (!key.starts_with(prefix)) return std::nullopt;
  return parse_index(key.substr(prefix.size()));
}

std::string worker_root(const std::string& run_id) { return run_root(run_id) + "/worker/"; }

std::string worker_prefix(const std::string& run_id, std::int64_t round) {
  return worker_root(run_id) + std::string(kRoundDir) + std::to_string(round) + "/";
}

std::optional<std::int64_t> worker_round_of(std::string_view rest) {
  if (!rest.starts_with(kRoundDir)) return std::nullopt;
  rest.remove_prefix(kRoundDir.size());
  return parse_index(rest.substr(0, rest.find('/')));
}

std::optional<RoundPart> round_part_of(std::string_view rest) {
  if (!rest.starts_with(kRoundDir)) return std::nullopt;
  rest.remove_prefix(kRoundDir.size());
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  const auto round = parse_index(rest.substr(0, slash));
  if (!round) return std::nullopt;
  return RoundPart{*round, rest.substr(slash + 1)};
}

std::vector<std::string> rounds_roots(const std::string& run_id) {
  return {rdzv_prefix(run_id) + std::string(kRoundDir), worker_root(run_id) + std::string(kRoundDir)};
}

std::string reform_prefix(const std::string& worker_prefix) { return worker_prefix + "reform/"; }

std::string reform_generation_key(const std::string& reform_prefix) { return reform_prefix + "generation"; }

std::string reform_size_key(const std::string& reform_prefix) { return reform_prefix + "size"; }

std::string reform_lost_key(const std::string& reform_prefix, std::int64_t slot) {
  return reform_prefix + "lost/" + std::to_string(slot);
}

std::string reform_generation_prefix(const std::string& reform_prefix, std::int64_t generation) {
  return reform_prefix + "g" + std::to_string(generation) + "/";
}

std::string reform_members_key(const std::string& reform_prefix, std::int64_t generation) {
  return reform_generation_prefix(reform_prefix, generation) + "members";
}

std::string reform_joined_key(const std::string& reform_prefix, std::int64_t generation) {
  return reform_generation_prefix(reform_prefix, generation) + "joined";
}

std::string reform_full_key(const std::string& reform_prefix, std::int64_t generation) {
  return reform_generation_prefix(reform_prefix, generation) + "full";
}

std::string reform_stalled_key(const std::string& reform_prefix) { return reform_prefix + "stalled"; }

std::string reform_finished_key(const std::string& reform_prefix) { return reform_prefix + "finished"; }

std::string agent_status_prefix(const std::string& run_id) { return run_root(run_id) + "/agent/status/"; }

std::string agent_status_key(const std::string& run_id, const std::string& node_id) {
  return agent_status_prefix(run_id) + node_id;
}

std::string agent_failure_prefix(const std::string& run_id) { return run_root(run_id) + "/agent/failure/"; }

std::string agent_failure_key(const std::string& run_id, const std::string& node_id) {
  return agent_failure_prefix(run_id) + node_id;
}

std::string stragglers_key(const std::string& run_id) { return run_root(run_id) + "/agent/stragglers"; }

std::string agent_first_failure_prefix(const std::string& run_id) {
  return run_root(run_id) + "/agent/first_failure/";
}

std::string agent_first_failure_key(const std::string& run_id, const std::string& node_id) {
  return agent_first_failure_prefix(run_id) + node_id;
}

std::optional<std::string_view> run_of_round_pointer(std::string_view key) {
  if (key.size() <= kRoundPointer.size() + 1 || key.front() != '/' || !key.ends_with(kRoundPointer)) {
    return std::nullopt;
  }
  const auto run = key.substr(1, key.size() - kRoundPointer.size() - 1);
  if (run.find('/') != std::string_view::npos) return std::nullopt;  // a run id never contains '/'
  return run;
}

namespace {

// "/<run>/rdzv/<rest>": the run and the rest; nullopt for any other key.
std::optional<std::pair<std::string_view, std::string_view>> split_rdzv(std::string_view key) {
  if (key.size() < 2 || key.front() != '/') return std::nullopt;
  const auto at = key.find(kRdzvDir, 1);
  if (at == std::string_view::npos) return std::nullopt;
  const auto run = key.substr(1, at - 1);
  if (run.empty() || run.find('/') != std::string_view::npos) return std::nullopt;
  return std::pair{run, key.substr(at + kRdzvDir.size())};
}

}  // namespace

std::optional<std::string_view> run_of_excluded(std::string_view key) {
  constexpr std::string_view kExcluded = "excluded/";
  const auto parts = split_rdzv(key);
  if (!parts || !parts->second.starts_with(kExcluded) || parts->second.size() == kExcluded.size()) {
    return std::nullopt;
  }
  return parts->first;
}

std::optional<SpareOf> spare_of(std::string_view key) {
  constexpr std::string_view kSpare = "/spare/";
  const auto parts = split_rdzv(key);
  if (!parts || !parts->second.starts_with(kRoundDir)) return std::nullopt;
  const auto rest = parts->second.substr(kRoundDir.size());
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos || rest.substr(slash, kSpare.size()) != kSpare) return std::nullopt;
  const auto round = parse_index(rest.substr(0, slash));
  if (!round || rest.size() == slash + kSpare.size()) return std::nullopt;
  return SpareOf{parts->first, *round};
}

std::optional<std::string_view> run_of_status_record(std::string_view key) {
  constexpr std::string_view kStatus = "status/";
  const auto k = job_key_of(key);
  if (!k || k->area != "agent" || !k->rest.starts_with(kStatus) || k->rest.size() == kStatus.size()) {
    return std::nullopt;
  }
  return k->run;
}

std::optional<std::string_view> run_of_stragglers(std::string_view key) {
  const auto k = job_key_of(key);
  if (!k || k->area != "agent" || k->rest != "stragglers") return std::nullopt;
  return k->run;
}

std::optional<JobKey> job_key_of(std::string_view key) {
  if (key.size() < 2 || key.front() != '/') return std::nullopt;
  const auto run_end = key.find('/', 1);
  if (run_end == std::string_view::npos || run_end == 1) return std::nullopt;
  const auto area_end = key.find('/', run_end + 1);
  if (area_end == std::string_view::npos) return std::nullopt;
  JobKey out{key.substr(1, run_end - 1), key.substr(run_end + 1, area_end - run_end - 1),
             key.substr(area_end + 1)};
  if (out.area != "rdzv" && out.area != "worker" && out.area != "agent") return std::nullopt;
  return out;
}

std::optional<std::int64_t> round_of(const JobKey& key) {
  if (key.area != "rdzv" && key.area != "worker") return std::nullopt;
  if (key.rest.find('/') == std::string_view::npos) return std::nullopt;  // "round" itself, or "closed"
  return worker_round_of(key.rest);
}

std::optional<std::int64_t> closed_round_of(const JobKey& key) {
  if (key.area != "rdzv" || !key.rest.ends_with("/closed")) return std::nullopt;
  const auto r = round_of(key);
  // Exactly "round_<r>/closed": nothing between the round and "closed".
  if (!r || key.rest.find('/') != key.rest.size() - std::string_view("/closed").size()) return std::nullopt;
  return r;
}

std::vector<std::string> job_prefixes(std::string_view run_id) {
  std::string root = "/";
  root.append(run_id);
  std::vector<std::string> out(3, root);
  out[0] += "/agent/";
  out[1] += "/rdzv/";
  out[2] += "/worker/";
  return out;
}

}  // namespace ddp::store::keys
