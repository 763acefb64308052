#include "job_records.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "ddp/common/json_input.hpp"
#include "ddp/store/job_keys.hpp"

namespace ddp::store::server {
namespace {

using nlohmann::json;

// What one field may hold once it is kept: a failure's text is a screen at
// most, a stack a few dozen frames. Bounds what a report holds whatever a
// record says.
constexpr std::size_t kMaxText = 4096;
constexpr std::size_t kMaxLines = 64;
constexpr std::size_t kMaxStragglers = 1000;

std::string text(const json& j, const char* key, std::size_t max = kMaxText) {
  const auto it = j.find(key);
  if (it == j.end()) return {};
  std::string s = it->is_string() ? it->get<std::string>() : it->is_null() ? "" : it->dump();
  if (s.size() > max) s.resize(max);
  return s;
}

std::int64_t integer(const json& j, const char* key, std::int64_t absent = -1) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<std::int64_t>() : absent;
}

double number(const json& j, const char* key, double absent = -1) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return absent;
  const double v = it->get<double>();
  return std::isfinite(v) ? v : absent;
}

std::vector<std::string> lines(const json& j, const char* key) {
  std::vector<std::string> out;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return out;
  for (const auto& line : *it) {
    if (out.size() == kMaxLines) break;
    std::string s = line.is_string() ? line.get<std::string>() : line.dump();
    if (s.size() > kMaxText) s.resize(kMaxText);
    out.push_back(std::move(s));
  }
  return out;
}

// A record's ages are as of its write; `now` may be behind it (another
// host's clock), never by a negative amount.
double aged(double age, double updated, double now) {
  if (age < 0) return -1;
  return std::clamp(age + std::max(0.0, now - updated), 0.0, 1e12);
}

json parse(std::string_view value, std::string* why = nullptr) {
  return try_parse_json(value, json_input::kStatusRecord, why);
}

}  // namespace

namespace {

// A status record read in one SAX pass, building no document: the listing
// reads every record of every job, and a 10,000-node job's records are ~20 MB
// of JSON. Only the fields below are kept; the bounds are parse_json's
// (json_input::kStatusRecord), checked as it goes.
class StatusSax final : public nlohmann::json_sax<json> {
 public:
  StatusSax(NodeStatus& n, bool with_ranks) : n_(n), with_ranks_(with_ranks) {}

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(std::int64_t v) override { return integer_value(v); }
  bool number_unsigned(std::uint64_t v) override {
    return v <= static_cast<std::uint64_t>(INT64_MAX) ? integer_value(static_cast<std::int64_t>(v))
                                                      : float_value(static_cast<double>(v));
  }
  bool number_float(double v, const std::string&) override { return float_value(v); }
  bool string(std::string& v) override {
    if (depth_ == 1) {
      if (key_ == "host") n_.host = v.substr(0, 1024);
      if (key_ == "state") n_.state = v.substr(0, 1024);
    } else if (in_worker()) {
      if (key_ == "state") ranks_.back().state = v.substr(0, 64);
      if (key_ == "section" && with_ranks_) ranks_.back().section = v.substr(0, 256);
    }
    return true;
  }
  bool binary(json::binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    if (!enter()) return false;
    if (depth_ == 1) top_is_object_ = true;
    if (depth_ == 3 && workers_open_) ranks_.emplace_back();
    return true;
  }
  bool key(std::string& k) override {
    if (depth_ == 1 || in_worker()) key_ = k;
    return true;
  }
  bool end_object() override {
    --depth_;
    key_.clear();
    return true;
  }
  bool start_array(std::size_t) override {
    const bool workers = depth_ == 1 && key_ == "workers";
    if (!enter()) return false;
    if (depth_ == 2) workers_open_ = workers;
    return true;
  }
  bool end_array() override {
    if (depth_ == 2) workers_open_ = false;
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = e.what();
    return false;
  }

  // After the parse: why the record cannot be read, or empty.
  std::string problem(bool parsed) const {
    if (too_deep_) return "the record nests more than " + std::to_string(json_input::kMaxDepth) + " levels";
    if (!parsed) return "the record is not valid JSON: " + error_;
    if (!top_is_object_) return "the record is not a JSON object";
    return {};
  }
  std::vector<RankStatus>& ranks() { return ranks_; }

 private:
  bool in_worker() const { return depth_ == 3 && workers_open_ && !ranks_.empty(); }
  bool enter() {
    if (++depth_ > static_cast<int>(json_input::kMaxDepth)) {
      too_deep_ = true;
      return false;
    }
    return true;
  }
  bool integer_value(std::int64_t v) {
    if (depth_ == 1) {
      if (key_ == "round") n_.round = v;
      if (key_ == "group_rank") n_.group_rank = v;
      if (key_ == "group_world_size") n_.group_world_size = v;
      if (key_ == "rank_first") n_.rank_first = v;
      if (key_ == "rank_last") n_.rank_last = v;
      if (key_ == "restart_count") n_.restarts = v;
      if (key_ == "max_restarts") n_.max_restarts = v;
      if (key_ == "updated") n_.updated = static_cast<double>(v);
    } else if (in_worker()) {
      auto& r = ranks_.back();
      if (key_ == "rank") r.rank = v;
      if (key_ == "steps") r.steps = v;
      if (key_ == "step_s") r.step_s = static_cast<double>(v);
      if (key_ == "heartbeat_age_s") r.heartbeat_age_s = static_cast<double>(v);
    }
    return true;
  }
  bool float_value(double v) {
    if (!std::isfinite(v)) return true;
    if (depth_ == 1 && key_ == "updated") n_.updated = v;
    if (in_worker()) {
      if (key_ == "step_s") ranks_.back().step_s = v;
      if (key_ == "heartbeat_age_s") ranks_.back().heartbeat_age_s = v;
    }
    return true;
  }

  NodeStatus& n_;
  bool with_ranks_;
  int depth_ = 0;
  std::string key_;  // the last key at depth 1, or inside a worker's object
  bool workers_open_ = false;
  bool top_is_object_ = false;
  bool too_deep_ = false;
  std::string error_;
  std::vector<RankStatus> ranks_;
};

}  // namespace

NodeStatus read_status_record(std::string_view node_id, std::string_view value, double now, bool with_ranks,
                              StatusFigures* figures) {
  NodeStatus n;
  n.node_id = std::string(node_id);
  if (value.size() > json_input::kStatusRecord.max_bytes) {
    n.problem = "the record is " + std::to_string(value.size()) + " bytes; at most " +
                std::to_string(json_input::kStatusRecord.max_bytes) + " are read";
    return n;
  }
  StatusSax sax(n, with_ranks);
  // json-parse-ok: bounded above (kStatusRecord's bytes) and by the handler (its depth).
  const bool parsed = json::sax_parse(value.begin(), value.end(), &sax);
  n.problem = sax.problem(parsed);
  if (!n.problem.empty()) {
    NodeStatus bad;
    bad.node_id = n.node_id;
    bad.problem = n.problem;
    return bad;
  }
  if (figures) figures->unhealthy = n.state.starts_with("unhealthy");
  for (auto& r : sax.ranks()) {
    r.heartbeat_age_s = aged(r.heartbeat_age_s, n.updated, now);
    if (r.step_s < 0) r.step_s = -1;
    if (figures && r.state == "running") {
      if (r.step_s >= 0) figures->step_s.push_back(r.step_s);
      figures->heartbeat_age_max_s = std::max(figures->heartbeat_age_max_s, r.heartbeat_age_s);
    }
  }
  if (with_ranks) n.ranks = std::move(sax.ranks());
  return n;
}

std::optional<FailureInfo> read_failure_record(std::string_view node_id, std::string_view value) {
  const auto j = parse(value);
  if (!j.is_object()) return std::nullopt;
  FailureInfo f;
  f.node_id = std::string(node_id);
  f.host = text(j, "host", 1024);
  f.round = integer(j, "round");
  f.rank = integer(j, "rank");
  f.time = number(j, "time", 0);
  f.summary = text(j, "summary");
  f.traceback = text(j, "traceback");
  f.stderr_tail = lines(j, "stderr_tail");
  if (const auto h = j.find("hang"); h != j.end() && h->is_object()) {
    f.hang = text(*h, "what");
    f.frames = lines(*h, "frames");
    f.other_ranks = lines(*h, "other_ranks");
  }
  return f;
}

std::optional<Verdict> read_verdict(std::string_view value, bool with_ranks) {
  const auto j = parse(value);
  if (!j.is_object()) return std::nullopt;
  const auto round = j.find("round");
  const auto list = j.find("stragglers");
  if (round == j.end() || !round->is_number_integer() || list == j.end() || !list->is_array()) {
    return std::nullopt;
  }
  Verdict v;
  v.round = round->get<std::int64_t>();
  for (const auto& s : *list) {
    // Counted even when not kept: the metric is the verdict's length.
    StragglerInfo info;
    if (with_ranks && s.is_object() && v.ranks.size() < kMaxStragglers) {
      info.rank = integer(s, "rank");
      info.node = text(s, "node", 1024);
      info.host = text(s, "host", 1024);
      info.step_s = number(s, "step_s");
      info.median_s = number(s, "median_s");
      info.factor = number(s, "factor");
      info.steps = integer(s, "steps", 0);
    }
    v.ranks.push_back(std::move(info));
  }
  return v;
}

NodeRecord read_node_record(std::string_view value) {
  NodeRecord r;
  const auto j = try_parse_json(value, json_input::kRendezvousRecord);
  if (!j.is_object()) return r;
  r.id = text(j, "id", 1024);
  r.host = text(j, "host", 1024);
  // Summed over a round's nodes: bounded, so that hostile records cannot overflow the sum.
  r.nproc = std::clamp<std::int64_t>(integer(j, "nproc", 0), 0, std::int64_t{1} << 24);
  return r;
}

std::optional<std::pair<std::int64_t, std::int64_t>> formed_round(std::string_view closed) {
  const auto sp = closed.find(' ');
  if (sp == std::string_view::npos) return std::nullopt;
  const auto rest = closed.substr(sp + 1);
  const auto count = keys::parse_index(closed.substr(0, sp));
  const auto workers = keys::parse_index(rest.substr(0, rest.find(' ')));
  if (!count || !workers) return std::nullopt;
  return std::pair{*count, *workers};
}

std::pair<std::string, std::string> round_end(std::string_view ended) {
  const auto& kNames = keys::kRoundEventNames;
  const auto sp = ended.find(' ');
  const auto code = keys::index_or_none(ended.substr(0, sp));
  const std::string detail(sp == std::string_view::npos ? "" : ended.substr(sp + 1));
  if (code < 0 || code >= static_cast<std::int64_t>(std::size(kNames)))
    return {std::string(kNames[0]), std::string(ended)};
  return {std::string(kNames[code]), detail};
}

std::string reported_failure(std::string_view ended) {
  // "node <id> reported a failure: <reason>".
  const auto [name, detail] = round_end(ended);
  if (name != keys::kRoundEventNames[0] || detail.find(keys::kReportedFailure) == std::string::npos)
    return {};
  return detail;
}

}  // namespace ddp::store::server
