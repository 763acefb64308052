// A Store decorator for the rendezvous tests: counts requests, round trips
// (a batch or watch_all is one, however many requests it carries; a watch_all
// of unconfirmed watches, which TcpStore sends without waiting, none) and payload
// bytes one handler sends through it, and can drop keepalives to play a
// stalled node, or fail them to play a node cut off from the store, and runs
// a test's hook before each list.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "ddp/common/error.hpp"
#include "ddp/store/store.hpp"

namespace ddp::test {

class CountingStore final : public store::Store {
 public:
  explicit CountingStore(std::shared_ptr<store::Store> inner) : inner_(std::move(inner)) {}

  std::atomic<long> requests{0};
  std::atomic<long> round_trips{0};
  std::atomic<long> bytes{0};                // keys + values sent and received
  std::atomic<bool> drop_keepalives{false};  // the lease then expires after its TTL
  std::atomic<bool> fail_keepalives{false};  // ... and the node hears nothing back
  // Called with the prefix before each list() reaches the store: a test writes
  // there what another node writes between two of this node's requests.
  std::function<void(const std::string&)> before_list;

  void reset() {
    requests = 0;
    round_trips = 0;
    bytes = 0;
  }

  store::Revision set(const std::string& k, std::string_view v, store::LeaseId l = 0) override {
    count(k.size() + v.size());
    return inner_->set(k, v, l);
  }
  std::string get(const std::string& k, std::chrono::milliseconds t) override {
    count(k.size());
    auto v = inner_->get(k, t);
    bytes += static_cast<long>(v.size());
    return v;
  }
  std::optional<std::string> try_get(const std::string& k) override {
    count(k.size());
    auto v = inner_->try_get(k);
    if (v) bytes += static_cast<long>(v->size());
    return v;
  }
  std::int64_t add(const std::string& k, std::int64_t d) override {
    count(k.size());
    return inner_->add(k, d);
  }
  std::string compare_set(const std::string& k, std::string_view e, std::string_view d,
                          store::LeaseId l = 0) override {
    count(k.size() + e.size() + d.size());
    return inner_->compare_set(k, e, d, l);
  }
  bool remove(const std::string& k) override {
    count(k.size());
    return inner_->remove(k);
  }
  bool check(const std::vector<std::string>& keys) override {
    count(keys_bytes(keys));
    return inner_->check(keys);
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) override {
    count(keys_bytes(keys));
    inner_->wait(keys, t);
  }
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override {
    count(keys_bytes(keys));
    auto v = inner_->multi_get(keys);
    for (const auto& x : v) bytes += x ? static_cast<long>(x->size()) : 0;
    return v;
  }
  store::Revision multi_set(const std::vector<std::pair<std::string, std::string>>& kvs,
                            store::LeaseId l = 0) override {
    std::size_t n = 0;
    for (const auto& [k, v] : kvs) n += k.size() + v.size();
    count(n);
    return inner_->multi_set(kvs, l);
  }
  std::int64_t append(const std::string& k, std::string_view v) override {
    count(k.size() + v.size());
    return inner_->append(k, v);
  }
  std::int64_t num_keys() override {
    count(0);
    return inner_->num_keys();
  }
  store::ListResult list(const std::string& prefix) override {
    count(prefix.size());
    if (before_list) before_list(prefix);
    auto r = inner_->list(prefix);
    for (const auto& kv : r.kvs) bytes += static_cast<long>(kv.key.size() + kv.value.size());
    return r;
  }
  void batch(std::vector<store::BatchOp>& ops) override {
    ++round_trips;
    for (const auto& op : ops) {
      requests += 1;
      bytes += static_cast<long>(op.key.size() + op.value.size() + op.expected.size());
    }
    inner_->batch(ops);
  }
  store::LeaseId lease_grant(std::chrono::milliseconds ttl) override {
    count(0);
    return inner_->lease_grant(ttl);
  }
  void lease_keepalive(store::LeaseId l) override {
    if (fail_keepalives) throw NetworkError("keepalive lost: the test cut this node off");
    if (drop_keepalives) return;
    count(0);
    inner_->lease_keepalive(l);
  }
  void lease_revoke(store::LeaseId l) override {
    count(0);
    inner_->lease_revoke(l);
  }
  std::unique_ptr<store::WatchHandle> watch(const std::string& prefix, store::Revision from,
                                            store::WatchCallback on_event,
                                            store::WatchErrorCallback on_error = {}) override {
    count(prefix.size());
    return inner_->watch(prefix, from, counted(std::move(on_event)), std::move(on_error));
  }
  std::vector<std::unique_ptr<store::WatchHandle>> watch_all(std::vector<store::WatchSpec> specs) override {
    if (std::any_of(specs.begin(), specs.end(),
                    [](const auto& s) { return s.confirmed || s.from_revision <= 0; }))
      ++round_trips;
    for (auto& s : specs) {
      requests += 1;
      bytes += static_cast<long>(s.prefix.size());
      s.on_event = counted(std::move(s.on_event));
    }
    return inner_->watch_all(std::move(specs));
  }

 private:
  // Counts the bytes of each event delivered to `cb`.
  store::WatchCallback counted(store::WatchCallback cb) {
    return [this, cb = std::move(cb)](const store::WatchEvent& ev) {
      bytes += static_cast<long>(ev.key.size() + ev.value.size());
      cb(ev);
    };
  }
  void count(std::size_t sent) {
    ++requests;
    ++round_trips;
    bytes += static_cast<long>(sent);
  }
  static std::size_t keys_bytes(const std::vector<std::string>& keys) {
    std::size_t n = 0;
    for (const auto& k : keys) n += k.size();
    return n;
  }
  std::shared_ptr<store::Store> inner_;
};

}  // namespace ddp::test
