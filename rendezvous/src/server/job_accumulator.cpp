#include "job_accumulator.hpp"

#include <algorithm>

#include "ddp/store/job_keys.hpp"
#include "job_records.hpp"

namespace ddp::store::server {
namespace {

bool stopped_by_signal(std::string_view why) { return why.find(" stopped by SIG") != std::string_view::npos; }

template <typename T>
void push_bounded(std::vector<T>& v, T item) {
  if (v.size() < kMaxNodesPerPage) v.push_back(std::move(item));
}

// Newest first, kMaxFailuresShown at most.
void trim_failures(std::vector<FailureInfo>& f) {
  std::sort(f.begin(), f.end(), [](const FailureInfo& a, const FailureInfo& b) { return a.time > b.time; });
  if (f.size() > kMaxFailuresShown) f.resize(kMaxFailuresShown);
}

}  // namespace

JobAccumulator::JobAccumulator(std::string run_id, const JobQuery* detail, double now)
    : run_id_(std::move(run_id)), query_(detail), now_(now) {
  summary_.run_id = run_id_;
}

void JobAccumulator::add(std::string_view area, std::string_view rest, std::string_view value, bool leased) {
  if (area == "agent") {
    add_agent(rest, value);
  } else if (area == "rdzv") {
    ++rdzv_keys_;
    add_rdzv(rest, value, leased);
  }
}

void JobAccumulator::add_agent(std::string_view rest, std::string_view value) {
  constexpr std::string_view kStatus = "status/";
  constexpr std::string_view kFailure = "failure/";
  if (rest.starts_with(kStatus) && rest.size() > kStatus.size()) {
    StatusFigures f;
    auto node = read_status_record(rest.substr(kStatus.size()), value, now_, false, &f);
    ++summary_.status_records;
    if (node.problem.empty()) {
      summary_.restarts = std::max(summary_.restarts, node.restarts);
      summary_.max_restarts = std::max(summary_.max_restarts, node.max_restarts);
      if (f.unhealthy) ++summary_.unhealthy;
      if (node.state == "succeeded") ++succeeded_records_;
      steps_.insert(steps_.end(), f.step_s.begin(), f.step_s.end());
      summary_.heartbeat_age_max_s = std::max(summary_.heartbeat_age_max_s, f.heartbeat_age_max_s);
    }
    if (query_) nodes_.push_back(std::move(node));
  } else if (rest.starts_with(kFailure) && rest.size() > kFailure.size()) {
    auto failure = read_failure_record(rest.substr(kFailure.size()), value);
    if (!failure) return;
    ++failures_total_;
    if (failure->time > newest_failure_) {
      newest_failure_ = failure->time;
      summary_.last_failure_time = failure->time;
      summary_.last_failure = failure->summary;
    }
    if (query_) {
      failures_.push_back(std::move(*failure));
      if (failures_.size() > 2 * kMaxFailuresShown) trim_failures(failures_);
    }
  } else if (rest == "stragglers") {
    if (auto v = read_verdict(value, query_ != nullptr)) {
      verdict_round_ = v->round;
      verdict_count_ = static_cast<std::int64_t>(v->ranks.size());
      if (query_) verdict_ranks_ = std::move(v->ranks);
    }
  }
}

void JobAccumulator::add_rdzv(std::string_view rest, std::string_view value, bool leased) {
  if (rest == "closed") {
    summary_.closed_reason = std::string(value);
  } else if (rest == "nnodes") {
    summary_.nnodes = std::string(value.substr(0, 64));
  } else if (rest == "round") {
    pointer_ = keys::parse_index(value);
  } else if (rest.starts_with("excluded/") && rest.size() > 9) {
    ++summary_.excluded;
    if (query_) push_bounded(excluded_, {std::string(rest.substr(9)), std::string(value.substr(0, 4096))});
  } else if (const auto part = keys::round_part_of(rest)) {
    add_round(part->round, part->what, value, leased);
  }
}

JobAccumulator::RoundFacts* JobAccumulator::round_facts(std::int64_t round) {
  // The pointer comes before the rounds' keys; without one the job is in round 0.
  const auto cur = pointer_.value_or(0);
  // Written so that a pointer of INT64_MAX (any client can set one) cannot overflow.
  if ((round < cur && cur - round > 1) || (round > cur && round - cur > 1)) return nullptr;
  return &rounds_[round];
}

void JobAccumulator::add_round(std::int64_t round, std::string_view what, std::string_view value,
                               bool leased) {
  auto* r = round_facts(round);
  if (r == nullptr) return;
  const bool current = round == pointer_.value_or(0);
  if (what == "closed") {
    r->closed = std::string(value.substr(0, 4096));
  } else if (what == "ctl/ended") {
    r->ended = std::string(value.substr(0, 4096));
  } else if (what == "done") {
    r->done = true;
  } else if (what == "nnodes") {
    is_static_ = true;
    r->static_nodes = keys::parse_index(value.substr(0, value.find(' ')));
    if (current && r->static_nodes) summary_.nnodes = std::to_string(*r->static_nodes);
  } else if (what.starts_with("node/") && leased) {
    ++r->members;
    // Parsed only where its numbers are needed: a round that has not closed
    // (its ranks so far), or the detail's member list.
    const bool forming = !r->closed || !formed_round(*r->closed);
    if (current && (forming || query_)) {
      auto rec = read_node_record(value);
      r->member_nproc += rec.nproc;
      if (query_) push_bounded(r->member_list, {std::string(what.substr(5)), rec.host});
    }
  } else if (what.starts_with("spare/") && what.size() > 6) {
    ++r->spares;
    if (query_ && current)
      push_bounded(r->spare_list, {std::string(what.substr(6)), read_node_record(value).host});
  }
}

JobSummary JobAccumulator::summary(const JobLife* life) {
  auto& s = summary_;
  const auto cur = pointer_.value_or(0);
  s.round = cur;
  RoundFacts none;
  const auto it = rounds_.find(cur);
  const RoundFacts& r = it == rounds_.end() ? none : it->second;
  s.nodes = r.members;
  s.spares = r.spares;
  s.backend = is_static_ ? "static" : "c10d";
  auto formed = r.closed ? formed_round(*r.closed) : std::nullopt;
  if (!formed && r.static_nodes && r.members >= *r.static_nodes && *r.static_nodes > 0) {
    formed = std::pair{r.members, r.member_nproc};
  }
  s.ranks = formed ? formed->second : r.member_nproc;
  if (!s.closed_reason.empty()) {
    s.state = stopped_by_signal(s.closed_reason) ? JobState::kStopped : JobState::kFailed;
  } else if (r.done || (s.status_records > 0 && succeeded_records_ == s.status_records)) {
    s.state = JobState::kSucceeded;
  } else if (formed) {
    // A formed round every member left without a word (all agents killed) runs no more.
    s.state = r.ended ? JobState::kRestarting : r.members == 0 ? JobState::kStopped : JobState::kRunning;
  } else {
    s.state = cur > 0 ? JobState::kRestarting : JobState::kForming;
  }
  if (s.last_failure.empty()) {
    // No report of its own: what the failing node told the others, or why the job was closed.
    for (const auto round : {cur, cur - 1}) {
      const auto f = rounds_.find(round);
      if (f != rounds_.end() && f->second.ended && s.last_failure.empty()) {
        s.last_failure = reported_failure(*f->second.ended);
      }
    }
    if (s.last_failure.empty() && s.state == JobState::kFailed) s.last_failure = s.closed_reason;
  }
  if (life != nullptr) {
    s.first_seen = life->first_seen;
    if (s.last_failure_time == 0 && !s.last_failure.empty()) s.last_failure_time = life->last_failure_time;
  }
  if (verdict_round_) s.stragglers = *verdict_round_ == cur ? verdict_count_ : 0;
  if (!steps_.empty()) {
    auto mid = steps_.begin() + static_cast<std::ptrdiff_t>(steps_.size() / 2);
    std::nth_element(steps_.begin(), mid, steps_.end());
    s.step_s = *mid;
  }
  return s;
}

JobDetail JobAccumulator::detail(
    const JobLife* life, const std::function<std::optional<std::string>(const std::string&)>& lookup) {
  JobDetail d;
  d.summary = summary_;
  const auto cur = pointer_.value_or(0);
  std::sort(nodes_.begin(), nodes_.end(), [](const NodeStatus& a, const NodeStatus& b) {
    if (a.round != b.round) return a.round > b.round;
    if (a.group_rank != b.group_rank) return a.group_rank < b.group_rank;
    return a.node_id < b.node_id;
  });
  d.nodes_total = nodes_.size();
  const std::size_t limit = std::clamp<std::size_t>(query_ ? query_->node_limit : 100, 1, kMaxNodesPerPage);
  d.node_offset = std::min(query_ ? query_->node_offset : 0, nodes_.size());
  const auto end = std::min(nodes_.size(), d.node_offset + limit);
  for (auto i = d.node_offset; i < end; ++i) {
    auto& n = nodes_[i];
    const auto value = lookup(keys::agent_status_key(run_id_, n.node_id));
    if (value) n = read_status_record(n.node_id, *value, now_, true);
    d.nodes.push_back(std::move(n));
  }
  if (const auto it = rounds_.find(cur); it != rounds_.end()) {
    d.members = std::move(it->second.member_list);
    d.spares = std::move(it->second.spare_list);
  }
  trim_failures(failures_);
  d.failures = std::move(failures_);
  d.failures_total = failures_total_;
  if (verdict_round_ && *verdict_round_ == cur) d.stragglers = std::move(verdict_ranks_);
  d.excluded = std::move(excluded_);
  if (life != nullptr) d.events.assign(life->events.begin(), life->events.end());
  return d;
}

}  // namespace ddp::store::server
