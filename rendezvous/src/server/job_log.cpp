#include "job_log.hpp"

#include "ddp/common/logging.hpp"
#include "ddp/common/printable.hpp"
#include "ddp/store/job_keys.hpp"
#include "job_records.hpp"

namespace ddp::store::server {
namespace {

// A job closed by an agent that was stopped (agent.cpp: "agent on H stopped by SIGTERM").
bool stopped_by_signal(std::string_view why) { return why.find(" stopped by SIG") != std::string_view::npos; }

}  // namespace

std::string shown(std::string_view s, std::size_t max) {
  auto out = printable(s);
  if (out.size() > max) {
    // Not inside an escape or a UTF-8 sequence: back up to a plain ASCII byte.
    std::size_t cut = max;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
    out.resize(cut);
    out += "...";
  }
  return out;
}

JobLife* JobLog::life(std::string_view run, double now) {
  const std::string key(run);
  if (auto it = jobs_.find(key); it != jobs_.end()) return &it->second;
  if (jobs_.size() >= kMaxJobs) return nullptr;
  auto& j = jobs_[key];
  j.first_seen = now;
  return &j;
}

void JobLog::adopt(const KvState& kv, double now) {
  std::string last;
  for (const auto& [key, entry] : kv.entries()) {
    const auto k = keys::job_key_of(key);
    if (!k || k->run == last) continue;
    last = std::string(k->run);
    life(k->run, now);
  }
}

void JobLog::event(std::string_view run, JobLife& j, double now, std::string text, bool log) {
  if (log && log_lines_) {
    // "job formed round=0 ..." logged as "job formed run_id=R round=0 ...".
    const auto fields = text.find('=') == std::string::npos ? text.size() : text.rfind(' ', text.find('='));
    ddp::log::get("store.jobs")
        ->info("{} run_id={}{}", text.substr(0, fields), shown(run, 256), text.substr(fields));
  }
  // `text` is escaped already (its outside parts through shown()); only cut here.
  if (text.size() > kMaxEventBytes) {
    std::size_t cut = kMaxEventBytes;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text.resize(cut);
    text += "...";
  }
  j.events.push_back({now, std::move(text)});
  while (j.events.size() > kMaxEvents) j.events.pop_front();
}

void JobLog::on_commit(const Mutation& m, const KvState& kv, double now) {
  for (const auto& c : m.changes) {
    if (c.kind != Change::Kind::kPut) continue;
    const auto k = keys::job_key_of(c.key);
    if (!k) continue;
    if (k->area == "rdzv") {
      on_rdzv_put(k->run, k->rest, c, kv, now);
    } else if (k->area == "agent" && k->rest.starts_with("failure/")) {
      if (auto* j = life(k->run, now)) {
        j->last_failure_time = now;
        event(k->run, *j, now, "failure reported by node " + shown(k->rest.substr(8), 256), false);
      }
    } else {
      life(k->run, now);
    }
  }
}

void JobLog::on_rdzv_put(std::string_view run, std::string_view rest, const Change& c, const KvState& kv,
                         double now) {
  auto* j = life(run, now);
  if (j == nullptr) return;
  const std::string run_id(run);
  if (rest == "closed") {
    if (j->ended) return;
    j->ended = true;
    event(run, *j, now,
          std::string(stopped_by_signal(c.value) ? "job stopped" : "job failed") + " reason=\"" +
              shown(c.value) + "\"",
          true);
    return;
  }
  const auto rk = keys::round_part_of(rest);
  if (!rk) return;
  const auto [round, what] = *rk;
  std::optional<std::pair<std::int64_t, std::int64_t>> formed;
  if (what == "closed") {
    formed = formed_round(c.value);
  } else if (what == "done") {
    if (j->ended) return;
    j->ended = true;
    event(run, *j, now, "job succeeded round=" + std::to_string(round), true);
    return;
  } else if (what == "ctl/ended") {
    const auto failure = reported_failure(c.value);
    if (!failure.empty()) j->last_failure_time = now;
    const auto [name, detail] = round_end(c.value);
    event(run, *j, now, "round " + std::to_string(round) + " ended: " + shown(name + ": " + detail), false);
    return;
  } else if (what.starts_with("node/") && c.prev_lease == 0) {
    // Static: its round is formed once every one of the N nodes joined.
    const auto* nn = kv.find(keys::round_prefix(run_id, round) + "nnodes");
    if (nn == nullptr) return;
    if (j->static_round != round) {
      j->static_round = round;
      j->static_joined = 0;
    }
    const auto n = keys::parse_index(std::string_view(nn->value).substr(0, nn->value.find(' ')));
    if (!n || ++j->static_joined != *n) return;
    std::int64_t ranks = 0;
    const auto prefix = keys::nodes_prefix(keys::round_prefix(run_id, round));
    for (auto it = kv.entries().lower_bound(prefix);
         it != kv.entries().end() && it->first.starts_with(prefix); ++it) {
      ranks += read_node_record(it->second.value).nproc;
    }
    formed = std::pair{*n, ranks};
  }
  if (!formed || round <= j->formed_round) return;
  j->formed_round = round;
  j->ended = false;
  std::string line = (round == 0 ? "job formed" : "job restarted") + std::string(" round=") +
                     std::to_string(round) + " nodes=" + std::to_string(formed->first) +
                     " ranks=" + std::to_string(formed->second);
  if (round > 0) {
    const auto* prev = kv.find(keys::round_prefix(run_id, round - 1) + "ctl/ended");
    const auto [name, detail] = prev ? round_end(prev->value) : std::pair<std::string, std::string>{};
    line += " why=\"" + (prev ? shown(name + ": " + detail) : std::string("unknown")) + "\"";
  }
  event(run, *j, now, std::move(line), true);
}

void JobLog::reclaimed(const std::string& run, std::size_t keys) {
  if (log_lines_) ddp::log::get("store.jobs")->info("job reclaimed run_id={} keys={}", shown(run, 256), keys);
  jobs_.erase(run);
}

void JobLog::prune(const KvState& kv) {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    bool any = false;
    for (const auto& prefix : keys::job_prefixes(it->first)) {
      const auto at = kv.entries().lower_bound(prefix);
      any = any || (at != kv.entries().end() && at->first.starts_with(prefix));
    }
    it = any ? std::next(it) : jobs_.erase(it);
  }
}

const JobLife* JobLog::find(std::string_view run) const {
  const auto it = jobs_.find(std::string(run));
  return it == jobs_.end() ? nullptr : &it->second;
}

}  // namespace ddp::store::server
