#include "lease_table.hpp"

namespace ddp::store::server {
namespace {

// A TTL past the clock's range (an old log's) never expires.
Clock::time_point expiry_after(Clock::time_point now, Millis ttl) {
  return ttl <= Millis::zero() ? now : saturating_add(now, ttl);
}

}  // namespace

LeaseId LeaseTable::grant(Millis ttl, Clock::time_point now) {
  const auto id = next_id_++;
  restore(id, ttl, now);
  return id;
}

void LeaseTable::restore(LeaseId id, Millis ttl, Clock::time_point now) {
  auto& l = leases_[id];
  if (l.id != 0) by_expiry_.erase({l.expiry, id});
  l.id = id;
  l.ttl = ttl;
  l.expiry = expiry_after(now, ttl);
  by_expiry_.insert({l.expiry, id});
  if (id >= next_id_) next_id_ = id + 1;
}

std::optional<Millis> LeaseTable::keepalive(LeaseId id, Clock::time_point now) {
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second.expiry <= now) return std::nullopt;
  auto& l = it->second;
  by_expiry_.erase({l.expiry, id});
  l.expiry = expiry_after(now, l.ttl);
  by_expiry_.insert({l.expiry, id});
  return l.ttl;
}

std::optional<Lease> LeaseTable::revoke(LeaseId id) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return std::nullopt;
  by_expiry_.erase({it->second.expiry, id});
  Lease l = std::move(it->second);
  leases_.erase(it);
  return l;
}

std::vector<Lease> LeaseTable::take_expired(Clock::time_point now) {
  std::vector<Lease> out;
  while (!by_expiry_.empty() && by_expiry_.begin()->first <= now) {
    const auto id = by_expiry_.begin()->second;
    if (auto l = revoke(id)) out.push_back(std::move(*l));
  }
  return out;
}

std::optional<Clock::time_point> LeaseTable::next_expiry() const {
  if (by_expiry_.empty()) return std::nullopt;
  return by_expiry_.begin()->first;
}

void LeaseTable::attach(LeaseId id, const std::string& key) {
  auto it = leases_.find(id);
  if (it != leases_.end()) it->second.keys.insert(key);
}

void LeaseTable::detach(LeaseId id, const std::string& key) {
  auto it = leases_.find(id);
  if (it != leases_.end()) it->second.keys.erase(key);
}

}  // namespace ddp::store::server
