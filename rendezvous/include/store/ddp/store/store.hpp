// The abstract key-value store that rendezvous, the agent and the worker SDK
// build on, modelled on PyTorch's c10d::Store plus the etcd primitives
// rendezvous needs. This file holds: the value types (LeaseId, Revision,
// KeyValue, ListResult, WatchEvent and the watch callbacks), CompactedError,
// BatchOp (one request of Store::batch and its answer) with
// rethrow_first_error, WatchHandle and WatchSpec (one watch of watch_all), and
// the Store interface itself: get/set/add/compare_set/append/multi_*/list,
// check and wait, leases, watches, and batch and watch_all (with defaults that
// send one request at a time). Implementations: TcpStore (tcp_store.hpp,
// client of ddp-rendezvousd or of an embedded StoreServer), MemoryStore
// (store_server's memory_store.hpp, in-process) and EtcdStore (etcd_store's
// etcd_store.hpp, etcd v3); the SDK's ElasticGroup wraps one internally.
//
// Thread-safety: every implementation is safe to call from several threads.
// Errors: TimeoutError when a deadline passes, NetworkError when the server is
// unreachable past the client's retry budget, StoreError for an error status.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddp/common/error.hpp"

namespace ddp::store {

using LeaseId = std::int64_t;  // 0 means "no lease"
using Revision = std::int64_t;

// Passed as a timeout to mean "no deadline".
inline constexpr std::chrono::milliseconds kNoTimeout{-1};

struct KeyValue {
  std::string key;
  std::string value;
  Revision revision = 0;  // revision of the last change to this key
};

struct ListResult {
  std::vector<KeyValue> kvs;  // sorted by key
  Revision revision = 0;      // store revision the listing reflects: watch from revision + 1
};

// One child of a prefix and how many keys it holds (Store::count_children).
struct ChildCount {
  std::string child;  // the part of a key after the prefix up to its first '/', included
  std::int64_t keys = 0;
};

enum class EventType : std::uint8_t { kPut = 0, kDelete = 1 };

struct WatchEvent {
  EventType type = EventType::kPut;
  std::string key;
  std::string value;  // empty for deletes
  Revision revision = 0;
};

// Called for each event in revision order, on an internal thread of the store:
// it must not block or call back into the same store synchronously for long.
using WatchCallback = std::function<void(const WatchEvent&)>;
// Called once if the watch ends abnormally (connection lost for good, history
// compacted); no events follow.
using WatchErrorCallback = std::function<void(const std::string& reason)>;

// A watch asked for a revision older than the history the store retains
// (COMPACTED on the wire). Not retryable as is: list() again and watch from
// the listing's revision + 1.
class CompactedError : public StoreError {
 public:
  using StoreError::StoreError;
};

// One request of Store::batch and, once the batch returns, its answer.
struct BatchOp {
  enum class Kind : std::uint8_t { kSet, kCompareSet, kAdd, kTryGet, kGet, kLeaseGrant };

  static BatchOp set(std::string key, std::string value, LeaseId lease = 0) {
    BatchOp op;
    op.key = std::move(key);
    op.value = std::move(value);
    op.lease = lease;
    return op;
  }
  static BatchOp compare_set(std::string key, std::string expected, std::string desired, LeaseId lease = 0) {
    BatchOp op = set(std::move(key), std::move(desired), lease);
    op.kind = Kind::kCompareSet;
    op.expected = std::move(expected);
    return op;
  }
  static BatchOp add(std::string key, std::int64_t delta) {
    BatchOp op;
    op.kind = Kind::kAdd;
    op.key = std::move(key);
    op.delta = delta;
    return op;
  }

  // try_get: `found` and `result`.
  static BatchOp try_get(std::string key) {
    BatchOp op;
    op.kind = Kind::kTryGet;
    op.key = std::move(key);
    return op;
  }
  // get, waiting up to `wait` for the key: `result`, or a TimeoutError in
  // `error`. The batch returns once this answer is in, so a waiting get goes
  // last: the requests before it are answered at once, in the same write.
  static BatchOp get(std::string key, std::chrono::milliseconds wait) {
    BatchOp op = try_get(std::move(key));
    op.kind = Kind::kGet;
    op.wait = wait;
    return op;
  }
  // lease_grant: the lease's id in `number`.
  static BatchOp lease_grant(std::chrono::milliseconds ttl) {
    BatchOp op;
    op.kind = Kind::kLeaseGrant;
    op.wait = ttl;
    return op;
  }

  Kind kind = Kind::kSet;
  std::string key;
  std::string value;     // set: the value; compare_set: the desired value
  std::string expected;  // compare_set
  std::int64_t delta = 0;
  LeaseId lease = 0;
  std::chrono::milliseconds wait{0};  // get: how long it waits; lease_grant: the TTL
  // set followed by another request of the batch: its revision is not wanted
  // (`number` may stay 0), so a network store may leave its success
  // unanswered and learn it from the next answer (TcpStore: kSetQuiet).
  bool quiet = false;

  // The answer: set's revision, add's new value or the lease granted;
  // compare_set's value after the call, or the value got (try_get: if found).
  std::int64_t number = 0;
  std::string result;
  bool found = false;
  std::exception_ptr error;  // this request failed; the others still ran
};

// Throws the first error left in `ops` by Store::batch, if any.
inline void rethrow_first_error(const std::vector<BatchOp>& ops) {
  for (const auto& op : ops) {
    if (op.error) std::rethrow_exception(op.error);
  }
}

// Owns a watch: destroying it (or cancel()) stops events.
class WatchHandle {
 public:
  virtual ~WatchHandle() = default;
  virtual void cancel() = 0;
};

// A WatchHandle that runs `cancel` on its first cancel() or, failing that, on
// destruction, and never again: a store's watch() when cancelling is one call.
std::unique_ptr<WatchHandle> make_watch_handle(std::function<void()> cancel);

// One watch of Store::watch_all: the arguments of Store::watch.
struct WatchSpec {
  std::string prefix;
  Revision from_revision = 0;
  WatchCallback on_event;
  WatchErrorCallback on_error;
  // false, with from_revision > 0: watch_all returns once the watch is sent,
  // without waiting for the store to confirm it, and a refusal (a
  // CompactedError's included) comes to on_error instead of being thrown.
  // Where a network store answers a confirmation per watch, this spares it.
  bool confirmed = true;
};

class Store {
 public:
  virtual ~Store() = default;

  virtual Revision set(const std::string& key, std::string_view value, LeaseId lease = 0) = 0;
  // Waits until the key exists; TimeoutError after `timeout` (kNoTimeout: forever).
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  // Atomic add on a decimal-text integer (a missing key counts as 0). Returns the new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // PyTorch semantics: returns the value after the call. Swaps when the current value
  // equals `expected`; a missing key with empty `expected` is created.
  virtual std::string compare_set(const std::string& key, std::string_view expected, std::string_view desired,
                                  LeaseId lease = 0) = 0;
  // Returns true if the key existed.
  virtual bool remove(const std::string& key) = 0;
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Waits until all keys exist (the server owns the timer).
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  virtual std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) = 0;
  virtual Revision multi_set(const std::vector<std::pair<std::string, std::string>>& kvs,
                             LeaseId lease = 0) = 0;
  // Appends to the value (creating it); returns the new length.
  virtual std::int64_t append(const std::string& key, std::string_view value) = 0;
  virtual std::int64_t num_keys() = 0;
  virtual ListResult list(const std::string& prefix) = 0;
  // The keys under `prefix` counted per child (the part after the prefix up
  // to and including its first '/', the whole rest when it has none), sorted
  // by child, without their values. The default lists them, values and all; a
  // network store asks its server to count (docs/store-protocol.md, count).
  virtual std::vector<ChildCount> count_children(const std::string& prefix);
  // Requests that do not depend on each other's answers, applied in order. A
  // network store sends them together and waits once (one round trip instead
  // of one each); this default runs them one after the other. Each answer or
  // error is left in its op; only a failure to reach the store throws.
  virtual void batch(std::vector<BatchOp>& ops);

  // Leases: keys set with a lease vanish when it expires or is revoked.
  virtual LeaseId lease_grant(std::chrono::milliseconds ttl) = 0;
  // Throws StoreError (lease not found) when the lease already expired.
  virtual void lease_keepalive(LeaseId lease) = 0;
  virtual void lease_revoke(LeaseId lease) = 0;

  // Streams put/delete events of keys under `prefix` with revision >= from_revision
  // (0: only changes after the watch starts). Events are never lost between a list()
  // and a watch from its revision + 1. A from_revision older than the retained
  // history is refused: TcpStore throws CompactedError.
  virtual std::unique_ptr<WatchHandle> watch(const std::string& prefix, Revision from_revision,
                                             WatchCallback on_event, WatchErrorCallback on_error = {}) = 0;
  // Several watches at once, handles in the order of `specs`: a network store
  // starts them in one round trip; this default calls watch() for each. If one
  // cannot start, none is left running and its error is thrown.
  virtual std::vector<std::unique_ptr<WatchHandle>> watch_all(std::vector<WatchSpec> specs);
};

}  // namespace ddp::store
