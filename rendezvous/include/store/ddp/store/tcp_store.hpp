// Client of the native store protocol (ddp-rendezvousd or an embedded StoreServer).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "ddp/common/endpoint.hpp"
#include "ddp/common/error.hpp"
#include "ddp/store/store.hpp"

namespace ddp::store {

// The server rejected the client's token (or protocol version). Retrying cannot
// help; the message says to check --token-file. Callers map it to a config error.
class AuthError : public StoreError {
 public:
  using StoreError::StoreError;
};

struct TcpStoreOptions {
  Endpoint endpoint;
  std::string token;  // empty: no auth
  // How long connect (and every reconnect) keeps retrying, with backoff and
  // jitter, before NetworkError naming the endpoint.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(30)};
  // The first connect's bound instead, when positive: a client may wait long
  // for a store that is not up yet (nodes start in any order) and still give
  // up soon on one it had and lost.
  std::chrono::milliseconds first_connect_timeout{0};
  // Deadline for a non-blocking request's reply.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(30)};
  // Leases this client grants also end when its connection closes (the process
  // died): others notice at once instead of after the TTL. A reconnect after a
  // broken connection then finds its leases gone (lease not found).
  bool bind_leases_to_connection = false;
  // Told why, after each failed attempt of the first connect while it keeps
  // retrying (not of reconnects), on the client's I/O thread: the caller can
  // say early that the store cannot be reached yet.
  std::function<void(const std::string& why)> on_connect_retry;
};

// One connection with pipelined requests, served by an internal I/O thread.
// Blocking calls (get, wait) wait on the server and do not hold up other calls.
// After a broken connection the client reconnects with backoff; requests in
// flight fail with NetworkError, watches resume from their last seen revision.
//
// Watch callbacks run on the I/O thread, which also reads every reply: a callback
// must not call this store's request methods (they throw StoreError instead of
// deadlocking) nor destroy the store; cancelling a watch there is fine.
//
// Thread-safe. The destructor stops and joins the I/O thread.
class TcpStore final : public Store {
 public:
  // Connects (with retry until options.first_connect_timeout, else
  // options.connect_timeout) and authenticates.
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

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
  // One COUNT request: the server counts, no value crosses the wire.
  std::vector<ChildCount> count_children(const std::string& prefix) override;
  // One write and one wait for all of `ops`.
  void batch(std::vector<BatchOp>& ops) override;
  LeaseId lease_grant(std::chrono::milliseconds ttl) override;
  void lease_keepalive(LeaseId lease) override;
  void lease_revoke(LeaseId lease) override;
  std::unique_ptr<WatchHandle> watch(const std::string& prefix, Revision from_revision,
                                     WatchCallback on_event, WatchErrorCallback on_error = {}) override;
  // One write for all the watch requests, then their acknowledgements.
  std::vector<std::unique_ptr<WatchHandle>> watch_all(std::vector<WatchSpec> specs) override;

  // TCPStore's queues (QUEUE_PUSH / QUEUE_LEN, docs/store-protocol.md): the
  // length after the push, and the length now. A push whose answer is lost is
  // not sent again (at most once, docs/reliability.md).
  std::int64_t queue_push(const std::string& queue, std::string_view value);
  std::int64_t queue_len(const std::string& queue);
  // Server statistics (connections, keys, leases, watches, revision, ...).
  std::map<std::string, std::string> stat();
  // The ddprun jobs on the server (JOBS, docs/store-protocol.md): run id and
  // its row as a JSON object, by run id; `run_id` non-empty: that job only.
  // `truncated` (when given) is set when the server had more jobs than it lists.
  std::vector<KeyValue> jobs(const std::string& run_id = {}, bool* truncated = nullptr);
  void ping();
  const Endpoint& endpoint() const;
  // Called on the I/O thread each time the client connects again after a
  // broken connection (not on the first connect): a lease bound to the old
  // connection is gone, or will be once the server sees it closed, unless the
  // server itself restarted. It may only hand work off (no call of this store
  // from it). nullptr removes it; once this returns, no call of the previous
  // callback is running.
  void on_reconnect(std::function<void()> fn);

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ddp::store
