// The store as a re-form generation's process group sees it (docs/reform.md):
// a wait or blocking get polls, and gives up with MembershipChanged once the
// generation moves on, so that a member dying while the group connects does
// not stall the others for the group's whole timeout. Every other call goes
// to the inner store as is.
//
// Thread-safety: as the inner store's.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddp/store/store.hpp"

namespace ddp::detail {

// Waits for keys block in the store (server-side) for at most this long
// between two reads of the generation: a wait returns as soon as its keys
// exist, and notices a newer generation within a slice.
inline constexpr std::chrono::milliseconds kReformSlice{50};

class GenerationStore final : public store::Store {
 public:
  GenerationStore(std::shared_ptr<store::Store> inner, std::string generation_key, std::int64_t g)
      : inner_(std::move(inner)), key_(std::move(generation_key)), g_(g) {}

  store::Revision set(const std::string& key, std::string_view value, store::LeaseId lease) override {
    return inner_->set(key, value, lease);
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<std::string> try_get(const std::string& key) override { return inner_->try_get(key); }
  std::int64_t add(const std::string& key, std::int64_t delta) override { return inner_->add(key, delta); }
  std::string compare_set(const std::string& key, std::string_view expected, std::string_view desired,
                          store::LeaseId lease) override {
    return inner_->compare_set(key, expected, desired, lease);
  }
  bool remove(const std::string& key) override { return inner_->remove(key); }
  bool check(const std::vector<std::string>& keys) override { return inner_->check(keys); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override {
    return inner_->multi_get(keys);
  }
  store::Revision multi_set(const std::vector<std::pair<std::string, std::string>>& kvs,
                            store::LeaseId lease) override {
    return inner_->multi_set(kvs, lease);
  }
  std::int64_t append(const std::string& key, std::string_view value) override {
    return inner_->append(key, value);
  }
  std::int64_t num_keys() override { return inner_->num_keys(); }
  store::ListResult list(const std::string& prefix) override { return inner_->list(prefix); }
  void batch(std::vector<store::BatchOp>& ops) override { inner_->batch(ops); }
  store::LeaseId lease_grant(std::chrono::milliseconds ttl) override { return inner_->lease_grant(ttl); }
  void lease_keepalive(store::LeaseId lease) override { inner_->lease_keepalive(lease); }
  void lease_revoke(store::LeaseId lease) override { inner_->lease_revoke(lease); }
  std::unique_ptr<store::WatchHandle> watch(const std::string& prefix, store::Revision from_revision,
                                            store::WatchCallback on_event,
                                            store::WatchErrorCallback on_error) override {
    return inner_->watch(prefix, from_revision, std::move(on_event), std::move(on_error));
  }
  std::vector<std::unique_ptr<store::WatchHandle>> watch_all(std::vector<store::WatchSpec> specs) override {
    return inner_->watch_all(std::move(specs));
  }

 private:
  // Runs `wait(slice)` (a blocking store call that throws TimeoutError when the
  // slice passes) until it returns, reading the generation between slices.
  void sliced(std::chrono::milliseconds timeout, const std::string& what,
              const std::function<void(std::chrono::milliseconds)>& wait);

  std::shared_ptr<store::Store> inner_;
  std::string key_;
  std::int64_t g_;
};

}  // namespace ddp::detail
