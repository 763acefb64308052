// The key-value map and the global revision, with PyTorch TCPStore semantics for
// add and compare_set. Pure state: no locks, no I/O, no clocks. Each mutating
// call appends its changes to a Mutation and bumps the revision once when it
// changes anything; calls that change nothing leave the revision alone.
//
// Thread-safety: none; the owner (the server's loop thread, or MemoryStore under
// its mutex) serialises access.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddp/store/protocol.hpp"
#include "mutation.hpp"

namespace ddp::store::server {

struct KvEntry {
  std::string value;
  Revision mod_revision = 0;
  LeaseId lease = 0;
};

struct AddResult {
  Status status = Status::kOk;  // kNotANumber when the value is not decimal int64 text
  std::int64_t value = 0;
};

struct CompareSetResult {
  std::string value;  // the value after the call
  bool swapped = false;
};

class KvState {
 public:
  Revision revision() const { return revision_; }
  std::size_t size() const { return map_.size(); }
  const KvEntry* find(const std::string& key) const;

  Revision set(const std::string& key, std::string_view value, LeaseId lease, Mutation& m);
  // A missing key counts as 0. The key keeps its lease.
  AddResult add(const std::string& key, std::int64_t delta, Mutation& m);
  CompareSetResult compare_set(const std::string& key, std::string_view expected, std::string_view desired,
                               LeaseId lease, Mutation& m);
  // Returns how many of the keys existed (and are now deleted).
  std::int64_t erase(const std::vector<std::string>& keys, Mutation& m);
  // Appends (creating the key); the key keeps its lease. Returns the new length.
  std::int64_t append(const std::string& key, std::string_view value, Mutation& m);
  Revision multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values,
                     LeaseId lease, Mutation& m);
  std::vector<KeyValue> list(std::string_view prefix) const;
  // The number of keys under `prefix`, values unread; with `by_child`, one
  // item per child of the prefix as well (protocol.hpp, Op::kCount).
  std::int64_t count(std::string_view prefix, std::vector<Item>* by_child) const;

  // Raw access for log replay and snapshots; no revision bookkeeping.
  void restore_put(const std::string& key, std::string value, Revision rev, LeaseId lease);
  void restore_erase(const std::string& key);
  void restore_revision(Revision rev) { revision_ = rev; }
  const std::map<std::string, KvEntry, std::less<>>& entries() const { return map_; }

 private:
  // The revision of the mutation being built: bumped on its first change.
  Revision begin(Mutation& m);
  void put(const std::string& key, std::string value, LeaseId lease, Mutation& m);

  std::map<std::string, KvEntry, std::less<>> map_;
  Revision revision_ = 0;
};

}  // namespace ddp::store::server
