#include "store_core.hpp"

namespace ddp::store::server {
namespace {

Response bad(Response resp, std::string why) {
  resp.status = Status::kBadRequest;
  resp.message = std::move(why);
  return resp;
}

// The argument shape every op expects; a mismatch is the client's bug.
std::optional<std::string> check_shape(const Request& req) {
  auto need = [&](std::size_t keys, std::size_t values) -> std::optional<std::string> {
    if (req.keys.size() == keys && req.values.size() == values) return std::nullopt;
    return std::string(op_name(req.op)) + " takes " + std::to_string(keys) + " key(s) and " +
           std::to_string(values) + " value(s), got " + std::to_string(req.keys.size()) + " and " +
           std::to_string(req.values.size());
  };
  switch (req.op) {
    case Op::kSet:
    case Op::kAppend:
      return need(1, 1);
    case Op::kGet:
    case Op::kTryGet:
    case Op::kAdd:
    case Op::kList:
    case Op::kCount:
      return need(1, 0);
    case Op::kCompareSet:
      return need(1, 2);
    case Op::kMultiSet:
      if (req.keys.size() != req.values.size()) return std::string("multi_set needs as many values as keys");
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

// A request that attaches keys to a lease, or keeps one alive or revokes it.
bool names_lease(const Request& req) {
  switch (req.op) {
    case Op::kSet:
    case Op::kCompareSet:
    case Op::kMultiSet:
    case Op::kLeaseKeepAlive:
    case Op::kLeaseRevoke:
      return req.a != 0;
    default:
      return false;
  }
}

}  // namespace

void StoreCore::track_leases(const Mutation& m) {
  for (const auto& c : m.changes) {
    if (c.kind != Change::Kind::kPut && c.kind != Change::Kind::kDelete) continue;
    if (c.prev_lease != 0 && (c.kind == Change::Kind::kDelete || c.prev_lease != c.lease))
      leases_.detach(c.prev_lease, c.key);
    if (c.kind == Change::Kind::kPut && c.lease != 0) leases_.attach(c.lease, c.key);
  }
}

template <typename Keys>
StoreCore::Undo StoreCore::capture(const Keys& keys) const {
  Undo u;
  u.revision = kv_.revision();
  if (!sink_) return u;  // nothing can refuse the mutation
  for (const auto& k : keys) {
    const auto* e = kv_.find(k);
    u.keys.emplace_back(k, e == nullptr ? std::nullopt : std::optional<KvEntry>(*e));
  }
  return u;
}

void StoreCore::undo(const Undo& u) {
  for (const auto& [key, entry] : u.keys) {
    if (entry)
      kv_.restore_put(key, entry->value, entry->mod_revision, entry->lease);
    else
      kv_.restore_erase(key);
  }
  kv_.restore_revision(u.revision);
  if (u.granted != 0) leases_.revoke(u.granted);
  for (const auto& l : u.leases) {
    // restore() counts the TTL from its `now`: this `now` gives back the old expiry.
    leases_.restore(l.id, l.ttl, l.expiry - l.ttl);
    for (const auto& k : l.keys) leases_.attach(l.id, k);
  }
}

void StoreCore::commit(Mutation& m, const Undo& u) {
  if (m.empty()) return;
  if (m.revision == 0) m.revision = kv_.revision();
  if (sink_) {
    try {
      sink_(m);
    } catch (...) {
      undo(u);
      throw;
    }
  }
  track_leases(m);
  auto events = events_of(m);
  if (!events.empty()) history_.append(events);
}

std::vector<std::string> StoreCore::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (kv_.find(k) == nullptr) out.push_back(k);
  }
  return out;
}

Response StoreCore::revoke(LeaseId id, Response resp) {
  auto lease = leases_.revoke(id);
  if (!lease) {
    resp.status = Status::kLeaseNotFound;
    resp.message = "lease " + std::to_string(id) + " not found (expired or revoked)";
    return resp;
  }
  resp.num = static_cast<std::int64_t>(lease->keys.size());
  std::vector<Lease> gone;
  gone.push_back(std::move(*lease));
  drop_leases(std::move(gone));
  resp.revision = kv_.revision();
  return resp;
}

void StoreCore::drop_leases(std::vector<Lease> gone) {
  if (gone.empty()) return;
  std::vector<std::string> keys;
  for (const auto& l : gone) keys.insert(keys.end(), l.keys.begin(), l.keys.end());
  auto u = capture(keys);
  Mutation m;
  kv_.erase(keys, m);
  for (const auto& l : gone) {
    Change c;
    c.kind = Change::Kind::kLeaseRevoke;
    c.lease = l.id;
    m.changes.push_back(std::move(c));
  }
  u.leases = std::move(gone);
  commit(m, u);
}

std::size_t StoreCore::expire_leases(Clock::time_point now) {
  auto due = leases_.take_expired(now);
  const auto n = due.size();
  drop_leases(std::move(due));
  return n;
}

std::size_t StoreCore::revoke_leases(const std::vector<LeaseId>& ids) {
  std::vector<Lease> gone;
  for (auto id : ids) {
    if (auto l = leases_.revoke(id)) gone.push_back(std::move(*l));
  }
  const auto n = gone.size();
  drop_leases(std::move(gone));
  return n;
}

std::size_t StoreCore::erase_keys(const std::vector<std::string>& keys) {
  auto u = capture(keys);
  Mutation m;
  const auto n = kv_.erase(keys, m);
  commit(m, u);
  return static_cast<std::size_t>(n);
}

Response StoreCore::execute(const Request& req, Clock::time_point now) {
  Response resp;
  resp.id = req.id;
  if (auto why = check_shape(req)) return bad(std::move(resp), *why);
  try {
    // A lease past due must not accept new keys or keepalives: a request that
    // names one reaps every lease due. Others leave leases due within the
    // batch window to the server's timer, which reaps them together.
    const auto due = leases_.next_expiry();
    if (due && (names_lease(req) || *due + expiry_batch_ <= now)) expire_leases(now);
  } catch (...) {
    if (!is_read_only(req.op)) throw;  // reads go on while the log refuses writes
  }

  auto lease_ok = [&](LeaseId lease) { return lease == 0 || leases_.exists(lease); };
  auto no_lease = [&](LeaseId lease) {
    resp.status = Status::kLeaseNotFound;
    resp.message = "lease " + std::to_string(lease) + " not found (expired or revoked)";
    resp.revision = kv_.revision();
    return resp;
  };

  Undo u;
  if (!is_read_only(req.op)) u = capture(req.keys);
  Mutation m;
  switch (req.op) {
    case Op::kSet:
      if (!lease_ok(req.a)) return no_lease(req.a);
      kv_.set(req.keys[0], req.values[0], req.a, m);
      break;
    case Op::kGet:
    case Op::kTryGet: {
      const auto* e = kv_.find(req.keys[0]);
      if (e == nullptr) {
        resp.status = Status::kNotFound;
      } else {
        resp.items.push_back({ItemKind::kPresent, req.keys[0], e->value, e->mod_revision});
      }
      break;
    }
    case Op::kAdd: {
      auto r = kv_.add(req.keys[0], req.b, m);
      resp.status = r.status;
      resp.num = r.value;
      if (r.status != Status::kOk)
        resp.message = "value of key '" + req.keys[0] + "' is not a decimal int64 (or the add overflows)";
      break;
    }
    case Op::kCompareSet: {
      if (!lease_ok(req.a)) return no_lease(req.a);
      auto r = kv_.compare_set(req.keys[0], req.values[0], req.values[1], req.a, m);
      resp.num = r.swapped ? 1 : 0;
      resp.items.push_back({ItemKind::kPresent, req.keys[0], std::move(r.value), 0});
      break;
    }
    case Op::kDelete:
      resp.num = kv_.erase(req.keys, m);
      break;
    case Op::kCheck:
      resp.num = missing(req.keys).empty() ? 1 : 0;
      break;
    case Op::kWait:
      if (!missing(req.keys).empty()) resp.status = Status::kNotFound;
      break;
    case Op::kMultiGet:
      for (const auto& k : req.keys) {
        const auto* e = kv_.find(k);
        if (e == nullptr)
          resp.items.push_back({ItemKind::kMissing, k, {}, 0});
        else
          resp.items.push_back({ItemKind::kPresent, k, e->value, e->mod_revision});
      }
      break;
    case Op::kMultiSet:
      if (!lease_ok(req.a)) return no_lease(req.a);
      kv_.multi_set(req.keys, req.values, req.a, m);
      break;
    case Op::kAppend:
      resp.num = kv_.append(req.keys[0], req.values[0], m);
      break;
    case Op::kNumKeys:
      resp.num = static_cast<std::int64_t>(kv_.size());
      break;
    case Op::kList:
      for (auto& kv : kv_.list(req.keys[0]))
        resp.items.push_back({ItemKind::kPresent, std::move(kv.key), std::move(kv.value), kv.revision});
      break;
    case Op::kCount:
      resp.num = kv_.count(req.keys[0], (req.a & kCountByChild) != 0 ? &resp.items : nullptr);
      break;
    case Op::kLeaseGrant: {
      if (req.b <= 0 || req.b > LeaseTable::kMaxTtl.count()) {
        return bad(std::move(resp), "lease_grant needs a ttl in 1.." +
                                        std::to_string(LeaseTable::kMaxTtl.count()) + " ms (one year), got " +
                                        std::to_string(req.b));
      }
      const auto id = leases_.grant(Millis(req.b), now);
      u.granted = id;
      Change c;
      c.kind = Change::Kind::kLeaseGrant;
      c.lease = id;
      c.ttl_ms = req.b;
      m.changes.push_back(std::move(c));
      resp.num = id;
      break;
    }
    case Op::kLeaseKeepAlive: {
      auto ttl = leases_.keepalive(req.a, now);
      if (!ttl) return no_lease(req.a);
      resp.num = ttl->count();
      break;
    }
    case Op::kLeaseRevoke:
      return revoke(req.a, std::move(resp));
    case Op::kStat:
      resp.items.push_back({ItemKind::kPresent, "keys", std::to_string(kv_.size()), 0});
      resp.items.push_back({ItemKind::kPresent, "leases", std::to_string(leases_.size()), 0});
      resp.items.push_back({ItemKind::kPresent, "revision", std::to_string(kv_.revision()), 0});
      break;
    case Op::kPing:
      break;
    case Op::kHello:
    case Op::kWatch:
    case Op::kCancel:
    case Op::kQueuePush:  // the dispatcher's TorchQueues, in memory only
    case Op::kQueuePop:
    case Op::kQueueLen:
    case Op::kBarrier:  // an add, then parked by the dispatcher
    case Op::kJobs:     // read in slices by the dispatcher
      return bad(std::move(resp), std::string(op_name(req.op)) + " is handled by the session");
  }
  commit(m, u);
  resp.revision = kv_.revision();
  return resp;
}

void StoreCore::replay(const Mutation& m, Clock::time_point now) {
  for (const auto& c : m.changes) {
    switch (c.kind) {
      case Change::Kind::kPut: {
        const auto* old = kv_.find(c.key);
        if (old != nullptr && old->lease != 0 && old->lease != c.lease) leases_.detach(old->lease, c.key);
        kv_.restore_put(c.key, c.value, m.revision, c.lease);
        if (c.lease != 0) leases_.attach(c.lease, c.key);
        break;
      }
      case Change::Kind::kDelete: {
        const auto* old = kv_.find(c.key);
        if (old != nullptr && old->lease != 0) leases_.detach(old->lease, c.key);
        kv_.restore_erase(c.key);
        break;
      }
      case Change::Kind::kLeaseGrant:
        leases_.restore(c.lease, Millis(c.ttl_ms), now);
        break;
      case Change::Kind::kLeaseRevoke:
        leases_.revoke(c.lease);
        break;
    }
  }
  if (m.revision > kv_.revision()) kv_.restore_revision(m.revision);
  auto events = events_of(m);
  if (!events.empty()) history_.append(events);
}

}  // namespace ddp::store::server
