#include "auth_limiter.hpp"

#include <algorithm>

namespace ddp::store::server {

Millis AuthLimiter::wait_for(const std::string& address, Clock::time_point now) const {
  auto it = peers_.find(address);
  if (it == peers_.end() || it->second.blocked_until <= now) return Millis::zero();
  return std::max(Millis(1), std::chrono::ceil<Millis>(it->second.blocked_until - now));
}

void AuthLimiter::record_failure(const std::string& address, Clock::time_point now) {
  auto it = peers_.find(address);
  if (it == peers_.end()) {
    make_room(now);
    it = peers_.emplace(address, Peer{}).first;
  }
  auto& p = it->second;
  if (p.failures > 0 && now - p.last_failure >= backoff_.forget_after) p.failures = 0;
  ++p.failures;
  p.last_failure = now;
  const auto over = static_cast<std::int64_t>(p.failures) - backoff_.free_failures;
  if (over > 0) {
    // base * 2^(over-1), saturating at max (the shift is bounded first).
    const auto shift = std::min<std::int64_t>(over - 1, 30);
    const auto delay = std::min<std::int64_t>(backoff_.base.count() << shift, backoff_.max.count());
    p.blocked_until = now + Millis(std::max<std::int64_t>(delay, 0));
  }
  ++period_.failed;
  count(address);
}

void AuthLimiter::record_delayed(const std::string& address) {
  ++period_.delayed;
  count(address);
}

void AuthLimiter::count(const std::string& address) {
  // Bounded like the peer table: past kMaxPeers new addresses only add to the totals.
  if (period_counts_.size() < kMaxPeers || period_counts_.count(address) != 0) ++period_counts_[address];
}

AuthLimiter::Summary AuthLimiter::take_summary() {
  Summary out = period_;
  out.peers = period_counts_.size();
  for (const auto& [address, count] : period_counts_) {
    if (count > out.top_count) {
      out.top_count = count;
      out.top_peer = address;
    }
  }
  period_ = {};
  period_counts_.clear();
  return out;
}

void AuthLimiter::make_room(Clock::time_point now) {
  if (peers_.size() < kMaxPeers) return;
  std::erase_if(peers_, [&](const auto& kv) {
    return kv.second.blocked_until <= now && now - kv.second.last_failure >= backoff_.forget_after;
  });
  if (peers_.size() < kMaxPeers) return;
  auto oldest = std::min_element(peers_.begin(), peers_.end(), [](const auto& a, const auto& b) {
    return a.second.last_failure < b.second.last_failure;
  });
  peers_.erase(oldest);
}

}  // namespace ddp::store::server
