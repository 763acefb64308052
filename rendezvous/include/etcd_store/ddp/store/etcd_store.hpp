// A Store backed by an etcd v3 cluster, spoken to through etcd's JSON gateway
// (HTTP/1.1 POST /v3/..., keys and values base64, int64 as JSON strings). The
// rendezvous algorithm written against Store runs on etcd unchanged.
//
// Mapping of Store onto etcd v3 (every key is options.prefix + key):
//   set          /v3/kv/put (with lease)                     -> header.revision
//   get          /v3/kv/range; if missing, a watch on the key from the range's
//                revision + 1 until it is put or the timeout passes
//   try_get      /v3/kv/range
//   add          /v3/kv/txn: compare version == 0 (missing) or mod_revision ==
//                the one read, then put the new decimal text; retried on conflict
//   compare_set  /v3/kv/txn: compare value == expected (version == 0 for a missing
//                key with empty `expected`), put on success, range on failure
//   remove       /v3/kv/deleterange
//   check, multi_get  one /v3/kv/txn of range requests (128 keys per txn)
//   wait         range the keys, then watch each missing one from that revision + 1
//   multi_set    one /v3/kv/txn of puts (128 per txn)
//   append       /v3/kv/txn loop like add
//   num_keys     /v3/kv/range over the whole prefix with count_only
//   list         /v3/kv/range [prefix, prefix + 1); revision = header.revision
//   create       /v3/kv/txn: compare version == 0, then put + count_only
//                ranges (they see the put); range on failure
//   count_at     one /v3/kv/txn of count_only ranges at a past revision
//   keys_created /v3/kv/range keys_only with max_create_revision
//   lease_grant  /v3/lease/grant (TTL in whole seconds, rounded up, at least 1)
//   lease_keepalive  /v3/lease/keepalive; a missing TTL in the answer means the
//                lease is gone: StoreError "lease N not found (expired or revoked)"
//   lease_revoke /v3/lease/revoke
//   watch        POST /v3/watch, a chunked stream of JSON lines, on its own
//                connection and thread; resumes from the last revision + 1 on
//                another member after a broken connection; a compacted history
//                ends the watch through the error callback.
//
// Failover: requests go to the endpoint that last answered; on a refused or
// broken connection, a timeout or an HTTP 5xx the next endpoint is tried, and
// after a full cycle the client backs off (with jitter) until connect_timeout.
// A request whose connection broke after it was sent may be retried on another
// member, so add/append are at-least-once across a member failure.
//
// Errors: NetworkError "etcd at HOST:PORT unreachable: <reason>" once every
// endpoint failed for connect_timeout; ConfigError when an endpoint is not an
// etcd v3 gateway (HTTP 404 on /v3/kv/range, or not JSON) or on a TLS mismatch;
// StoreError when etcd rejects a request (CompactedError for a revision etcd
// compacted away); TimeoutError from get/wait naming the key.
//
// Thread-safe: requests use a small pool of keep-alive connections. Each watch
// (and each blocking get/wait) owns one connection and one thread; the
// destructor of a watch handle stops and joins it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ddp/common/endpoint.hpp"
#include "ddp/store/store.hpp"

namespace ddp::store {

struct EtcdStoreOptions {
  std::vector<Endpoint> endpoints;  // members to try, in order
  std::string prefix;               // every key lives under it, e.g. "/ddp/"
  // TLS: https when set or when any file below is given. ca_file verifies the
  // server (the system's CAs when empty); cert_file + key_file authenticate the client.
  bool https = false;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  // How long a request keeps trying endpoints (with backoff) before NetworkError.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(30)};
  // Deadline of one HTTP exchange with one member.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(15)};
  // Told why after each round in which every endpoint failed while a request
  // keeps retrying (on the calling thread): say early that etcd cannot be reached.
  std::function<void(const std::string& why)> on_unreachable;

  bool tls() const { return https || !ca_file.empty() || !cert_file.empty() || !key_file.empty(); }
};

// Parses "HOST:PORT[,HOST:PORT...]" (an http:// or https:// scheme is accepted and
// ignored: TLS is chosen by the options). Throws ConfigError naming `what`.
std::vector<Endpoint> parse_etcd_endpoints(std::string_view text, std::string_view what);

class EtcdStore final : public Store {
 public:
  // Checks the options (TLS files readable) but does not contact etcd: the first
  // request does, so a store can be built before the cluster is up.
  explicit EtcdStore(EtcdStoreOptions options);
  ~EtcdStore() override;
  EtcdStore(const EtcdStore&) = delete;
  EtcdStore& operator=(const EtcdStore&) = delete;

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

  // Ordering by creation, for protocols where many writers must not contend on
  // one key (the rendezvous arrival step, docs/rendezvous.md "etcd backend"):
  // each writer creates its own key, and etcd's create revisions order them.
  //
  struct Counts {
    std::vector<std::int64_t> counts;  // one per prefix, in order
    Revision revision = 0;             // the revision all counts reflect
  };
  // Creates `key` unless it exists and, in the same txn, counts the keys under
  // each of `count_prefixes` as of that write (the new key included): one
  // request. Returns the key's create revision and those counts. When the key
  // already existed (a request retried after a member failover), its first
  // create revision is returned and the counts are count_at that revision.
  // `also_put` (BatchOp::set each) are written in the same txn when it creates.
  Counts create(const std::string& key, std::string_view value, LeaseId lease = 0,
                const std::vector<std::string>& count_prefixes = {},
                const std::vector<BatchOp>& also_put = {});
  // How many keys existed under each prefix at `revision` (0: now), all read in
  // one txn. For keys that are never deleted that is "created at or before
  // `revision`". (etcd 3.4's count_only ignores max_create_revision: its count
  // is taken before that filter, so a past revision is the way to count.)
  // Throws CompactedError (a StoreError) when etcd compacted that revision away.
  Counts count_at(const std::vector<std::string>& prefixes, Revision revision);
  // The keys (without the store prefix) under `prefix` created at or before
  // `max_create_revision` (0: no bound), as of `at_revision` (0: now). One
  // request whose answer grows with the number of keys.
  std::vector<std::string> keys_created(const std::string& prefix, Revision max_create_revision,
                                        Revision at_revision = 0);

  // Contacts etcd (one range request); throws like any request would. Lets a
  // caller fail fast on a bad endpoint instead of at its first real request.
  void ping();
  const EtcdStoreOptions& options() const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ddp::store
