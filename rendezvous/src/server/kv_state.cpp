#include "kv_state.hpp"

#include "ddp/common/parse.hpp"

namespace ddp::store::server {

const KvEntry* KvState::find(const std::string& key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

Revision KvState::begin(Mutation& m) {
  if (m.revision == 0) m.revision = ++revision_;
  return m.revision;
}

void KvState::put(const std::string& key, std::string value, LeaseId lease, Mutation& m) {
  const auto rev = begin(m);
  Change c;
  c.kind = Change::Kind::kPut;
  c.key = key;
  c.value = value;
  c.lease = lease;
  auto [it, inserted] = map_.try_emplace(key);
  if (!inserted) c.prev_lease = it->second.lease;
  it->second.value = std::move(value);
  it->second.mod_revision = rev;
  it->second.lease = lease;
  m.changes.push_back(std::move(c));
}

Revision KvState::set(const std::string& key, std::string_view value, LeaseId lease, Mutation& m) {
  put(key, std::string(value), lease, m);
  return m.revision;
}

AddResult KvState::add(const std::string& key, std::int64_t delta, Mutation& m) {
  std::int64_t current = 0;
  LeaseId lease = 0;
  if (const auto* e = find(key)) {
    // Decimal int64 text, the whole string: what torch's add() stores and accepts.
    auto parsed = ddp::parse_int<std::int64_t>(e->value);
    if (!parsed) return {Status::kNotANumber, 0};
    current = *parsed;
    lease = e->lease;
  }
  std::int64_t result = 0;
  if (__builtin_add_overflow(current, delta, &result)) return {Status::kNotANumber, current};
  put(key, std::to_string(result), lease, m);
  return {Status::kOk, result};
}

CompareSetResult KvState::compare_set(const std::string& key, std::string_view expected,
                                      std::string_view desired, LeaseId lease, Mutation& m) {
  const auto* e = find(key);
  if (e == nullptr) {
    // torch: a missing key is created only when the caller expected "nothing".
    if (!expected.empty()) return {std::string(expected), false};
    put(key, std::string(desired), lease, m);
    return {std::string(desired), true};
  }
  if (e->value != expected) return {e->value, false};
  put(key, std::string(desired), lease, m);
  return {std::string(desired), true};
}

std::int64_t KvState::erase(const std::vector<std::string>& keys, Mutation& m) {
  std::int64_t n = 0;
  for (const auto& key : keys) {
    auto it = map_.find(key);
    if (it == map_.end()) continue;
    begin(m);
    Change c;
    c.kind = Change::Kind::kDelete;
    c.key = key;
    c.prev_lease = it->second.lease;
    m.changes.push_back(std::move(c));
    map_.erase(it);
    ++n;
  }
  return n;
}

std::int64_t KvState::append(const std::string& key, std::string_view value, Mutation& m) {
  std::string next;
  LeaseId lease = 0;
  if (const auto* e = find(key)) {
    next.reserve(e->value.size() + value.size());
    next = e->value;
    lease = e->lease;
  }
  next.append(value);
  const auto len = static_cast<std::int64_t>(next.size());
  put(key, std::move(next), lease, m);
  return len;
}

Revision KvState::multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values,
                            LeaseId lease, Mutation& m) {
  for (std::size_t i = 0; i < keys.size() && i < values.size(); ++i) put(keys[i], values[i], lease, m);
  return m.revision;
}

std::vector<KeyValue> KvState::list(std::string_view prefix) const {
  std::vector<KeyValue> out;
  for (auto it = map_.lower_bound(prefix); it != map_.end(); ++it) {
    if (it->first.compare(0, prefix.size(), prefix) != 0) break;
    out.push_back({it->first, it->second.value, it->second.mod_revision});
  }
  return out;
}

std::int64_t KvState::count(std::string_view prefix, std::vector<Item>* by_child) const {
  std::int64_t total = 0;
  std::string_view child;  // the current child: its keys are adjacent in key order
  std::int64_t in_child = 0;
  auto flush = [&] {
    if (by_child != nullptr && in_child > 0)
      by_child->push_back({ItemKind::kPresent, std::string(child), std::to_string(in_child), 0});
  };
  for (auto it = map_.lower_bound(prefix); it != map_.end(); ++it) {
    const std::string_view key = it->first;
    if (!key.starts_with(prefix)) break;
    ++total;
    if (by_child == nullptr) continue;
    const std::string_view rest = key.substr(prefix.size());
    const auto slash = rest.find('/');
    const std::string_view this_child = slash == std::string_view::npos ? rest : rest.substr(0, slash + 1);
    if (in_child > 0 && this_child == child) {
      ++in_child;
      continue;
    }
    flush();
    child = this_child;
    in_child = 1;
  }
  flush();
  return total;
}

void KvState::restore_put(const std::string& key, std::string value, Revision rev, LeaseId lease) {
  auto& e = map_[key];
  e.value = std::move(value);
  e.mod_revision = rev;
  e.lease = lease;
  if (rev > revision_) revision_ = rev;
}

void KvState::restore_erase(const std::string& key) { map_.erase(key); }

}  // namespace ddp::store::server
