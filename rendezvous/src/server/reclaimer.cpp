#include "reclaimer.hpp"

#include <algorithm>

#include "ddp/store/job_keys.hpp"

namespace ddp::store::server {
namespace {

// Calls fn(key, entry) for each key of `kv` under `prefix`, in order.
template <typename Fn>
void for_each_under(const KvState& kv, const std::string& prefix, Fn&& fn) {
  const auto& map = kv.entries();
  for (auto it = map.lower_bound(prefix); it != map.end() && it->first.starts_with(prefix); ++it) {
    fn(it->first, it->second);
  }
}

}  // namespace

std::vector<std::string> Reclaimer::on_commit(const Mutation& m, const KvState& kv, Clock::time_point now) {
  std::vector<std::string> old;
  for (const auto& c : m.changes) {
    if (c.kind != Change::Kind::kPut && c.kind != Change::Kind::kDelete) continue;
    const auto job = keys::job_key_of(c.key);
    if (!job) continue;
    if (options_.idle_after.count() > 0) {
      // A deletion (the reclamation's own among them) never starts tracking a job.
      auto it = last_write_.find(std::string(job->run));
      if (it != last_write_.end()) {
        it->second = now;
      } else if (c.kind == Change::Kind::kPut) {
        last_write_.emplace(std::string(job->run), now);
      }
    }
    if (options_.keep_rounds <= 0 || c.kind != Change::Kind::kPut) continue;
    const auto closed = keys::closed_round_of(*job);
    if (!closed || *closed < options_.keep_rounds) continue;
    const auto last_old = *closed - options_.keep_rounds;
    const std::string run(job->run);
    for (const auto& root : keys::rounds_roots(run)) {
      for_each_under(kv, root, [&](const std::string& key, const KvEntry&) {
        const auto k = keys::job_key_of(key);
        const auto r = k ? keys::round_of(*k) : std::nullopt;
        if (r && *r <= last_old) old.push_back(key);
      });
    }
  }
  std::sort(old.begin(), old.end());
  old.erase(std::unique(old.begin(), old.end()), old.end());
  return old;
}

std::vector<std::string> Reclaimer::idle_jobs(const KvState& kv, Clock::time_point now) {
  std::vector<std::string> out;
  if (options_.idle_after.count() <= 0) return out;
  if (!adopted_) {
    adopted_ = true;
    for (const auto& [key, entry] : kv.entries()) {
      if (const auto job = keys::job_key_of(key)) last_write_.try_emplace(std::string(job->run), now);
    }
  }
  for (auto it = last_write_.begin(); it != last_write_.end();) {
    if (now - it->second < options_.idle_after) {
      ++it;
      continue;
    }
    bool leased = false;
    std::vector<std::string> keys;
    for (const auto& prefix : keys::job_prefixes(it->first)) {
      for_each_under(kv, prefix, [&](const std::string& key, const KvEntry& e) {
        leased = leased || e.lease != 0;
        keys.push_back(key);
      });
    }
    if (leased) {  // an agent still holds it: look again a period later
      it->second = now;
      ++it;
      continue;
    }
    if (!keys.empty()) {  // else its keys went some other way
      ++reclaimed_jobs_;
      reclaimed_runs_.emplace_back(it->first, keys.size());
    }
    out.insert(out.end(), keys.begin(), keys.end());
    it = last_write_.erase(it);
  }
  return out;
}

std::chrono::milliseconds Reclaimer::sweep_period() const {
  if (options_.idle_after.count() <= 0) return std::chrono::milliseconds(0);
  // A quarter of the idle time: a job goes at most 25 % late; within bounds
  // so that a tiny setting does not spin and a day-long one is still looked at.
  return std::clamp(options_.idle_after / 4, std::chrono::milliseconds(100),
                    std::chrono::milliseconds(60000));
}

}  // namespace ddp::store::server
