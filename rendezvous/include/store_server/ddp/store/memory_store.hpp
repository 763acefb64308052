// An in-process Store: the server's own state classes behind a mutex, for
// `ddprun --standalone`-style single-process use and for unit tests of code
// built on Store (rendezvous, SDK) without sockets. Same answers as the server:
// both execute requests through one StoreCore.
#pragma once

#include <memory>

#include "ddp/store/store.hpp"

namespace ddp::store {

// Thread-safe. Owns one internal thread that expires leases and runs watch
// callbacks (in revision order per watch). A callback may call back into the
// store; cancelling a watch from another thread waits for a running callback of
// that watch to return. The destructor stops and joins the thread.
class MemoryStore final : public Store {
 public:
  MemoryStore();
  ~MemoryStore() override;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  Revision set(const std::string& key, std::string_view value, LeaseId lease = 0) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<std::string> try_get(const std::string& key) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, std::string_view expected, std::string_view desired,
                          LeaseId lease = 0) override;
  bool remove(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override;
  Revision multi_set(const std::vector<std::pair<std::string, std::string>>& kvs, LeaseId lease = 0) override;
  std::int64_t append(const std::string& key, std::string_view value) override;
  std::int64_t num_keys() override;
  ListResult list(const std::string& prefix) override;
  LeaseId lease_grant(std::chrono::milliseconds ttl) override;
  void lease_keepalive(LeaseId lease) override;
  void lease_revoke(LeaseId lease) override;
  std::unique_ptr<WatchHandle> watch(const std::string& prefix, Revision from_revision,
                                     WatchCallback on_event, WatchErrorCallback on_error = {}) override;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ddp::store
