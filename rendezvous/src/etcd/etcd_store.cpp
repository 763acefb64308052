#include "ddp/store/etcd_store.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "ddp/common/deadline.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/time_bounds.hpp"
#include "etcd_client.hpp"
#include "etcd_codec.hpp"
#include "etcd_watch.hpp"

namespace ddp::store {

using nlohmann::json;
using namespace etcd;

namespace {

// etcd's default --max-txn-ops: longer key lists are split into several txns.
constexpr std::size_t kMaxTxnOps = 128;
// add/append conflicts: a txn takes ~1 ms, so contenders spread over a few ms
// at first and up to 2 s when a thousand join at once (full jitter spreads them
// over a window about as long as etcd needs to serve them one by one).
constexpr Millis kConflictBackoffBase{2};
constexpr Millis kConflictBackoffCap{2048};

std::string of_key(const char* op, const std::string& key) {
  return std::string(op) + " of key '" + key + "'";
}

json put_op(const std::string& full_key, std::string_view value, LeaseId lease, bool keep_lease = false) {
  json put = {{"key", base64_encode(full_key)}, {"value", base64_encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  if (keep_lease) put["ignore_lease"] = true;
  return put;
}

json compare(const std::string& full_key, const char* target, const char* field, json operand) {
  return {
      {"key", base64_encode(full_key)}, {"target", target}, {"result", "EQUAL"}, {field, std::move(operand)}};
}

json version_is_zero(const std::string& full_key) { return compare(full_key, "VERSION", "version", "0"); }

Revision header_revision(const json& answer) {
  return get_i64(answer.value("header", json::object()), "revision");
}

// The single kv of a txn's failure branch (a range of one key), or null when missing.
const json* failure_kv(const json& answer) {
  const auto responses = answer.find("responses");
  if (responses == answer.end() || !responses->is_array() || responses->empty()) return nullptr;
  const auto range = (*responses)[0].find("response_range");
  if (range == (*responses)[0].end()) return nullptr;
  const auto kvs = range->find("kvs");
  if (kvs == range->end() || kvs->empty()) return nullptr;
  return &(*kvs)[0];
}

}  // namespace

std::vector<Endpoint> parse_etcd_endpoints(std::string_view text, std::string_view what) {
  std::vector<Endpoint> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    auto part = text.substr(start, comma - start);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && (part.back() == ' ' || part.back() == '/')) part.remove_suffix(1);
    for (std::string_view scheme : {"http://", "https://"})
      if (part.substr(0, scheme.size()) == scheme) part.remove_prefix(scheme.size());
    if (!part.empty()) out.push_back(parse_endpoint(part, what, 2379));
    start = comma + 1;
  }
  if (out.empty())
    throw ConfigError(std::string(what) + ": no etcd endpoint given (expected HOST:PORT[,HOST:PORT...])");
  return out;
}

class EtcdStore::Impl {
 public:
  explicit Impl(EtcdStoreOptions opts)
      : prefix(opts.prefix), client(std::make_shared<EtcdClient>(std::move(opts))) {}

  std::string full(const std::string& key) const { return prefix + key; }
  // etcd rejects an empty key: a scan of everything starts at "\0".
  static std::string scan_start(const std::string& full_prefix) {
    return full_prefix.empty() ? std::string(1, '\0') : full_prefix;
  }

  json call(const std::string& path, const json& body, const std::string& what) {
    return client->call(path, body, what);
  }

  json txn(json compares, json success, json failure, const std::string& what) {
    return call(
        "/v3/kv/txn",
        {{"compare", std::move(compares)}, {"success", std::move(success)}, {"failure", std::move(failure)}},
        what);
  }

  // Range of each key (in txns of kMaxTxnOps); returns each key's kv or null.
  std::vector<std::optional<std::string>> range_many(const std::vector<std::string>& keys, bool count_only,
                                                     Revision* revision, const char* op) {
    std::vector<std::optional<std::string>> out;
    out.reserve(keys.size());
    for (std::size_t begin = 0; begin < keys.size(); begin += kMaxTxnOps) {
      const auto end = std::min(keys.size(), begin + kMaxTxnOps);
      json ops = json::array();
      for (auto i = begin; i < end; ++i) {
        json range = {{"key", base64_encode(full(keys[i]))}};
        if (count_only) range["count_only"] = true;
        ops.push_back({{"request_range", std::move(range)}});
      }
      const auto answer = txn(json::array(), std::move(ops), json::array(), of_key(op, keys[begin]));
      if (revision != nullptr) *revision = header_revision(answer);
      const auto& responses = answer.value("responses", json::array());
      for (auto i = begin; i < end; ++i) {
        const auto& range = responses.at(i - begin).value("response_range", json::object());
        if (get_i64(range, "count") == 0) {
          out.emplace_back(std::nullopt);
        } else {
          const auto kvs = range.find("kvs");
          out.emplace_back(kvs == range.end() || kvs->empty() ? std::string()
                                                              : get_bytes((*kvs)[0], "value"));
        }
      }
    }
    return out;
  }

  enum class WaitOutcome { kPut, kTimedOut, kWatchEnded };
  // Waits for a put of `key` at a revision >= from; the value goes to *value.
  WaitOutcome wait_for_put(const std::string& key, Revision from, Deadline deadline, std::string* value) {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<std::string> found;
    bool ended = false;
    EtcdWatch watch(
        client, full(key), "", from, prefix.size(),
        [&](const WatchEvent& ev) {
          if (ev.type != EventType::kPut) return;
          std::lock_guard lock(mu);
          found = ev.value;
          cv.notify_all();
        },
        [&](const std::string&) {
          std::lock_guard lock(mu);
          ended = true;
          cv.notify_all();
        });
    std::unique_lock lock(mu);
    const auto done = [&] { return found.has_value() || ended; };
    if (deadline.is_never())
      cv.wait(lock, done);
    else
      cv.wait_until(lock, deadline.at(), done);
    if (found) {
      if (value != nullptr) *value = std::move(*found);
      return WaitOutcome::kPut;
    }
    return ended ? WaitOutcome::kWatchEnded : WaitOutcome::kTimedOut;
  }

  // add/append: read-modify-write as a txn on the key's mod_revision, retried
  // on conflict. The first try assumes a missing key (one request for a new
  // counter); a conflict's failure branch carries the current value.
  template <class Next>
  std::string read_modify_write(const std::string& key, const char* op, Next next) {
    const auto k = full(key);
    json cmp = version_is_zero(k);
    std::string value = next(nullptr);
    bool exists = false;
    Backoff backoff(kConflictBackoffBase, kConflictBackoffCap);
    for (int attempt = 0;; ++attempt) {
      const auto answer =
          txn(json::array({cmp}), json::array({{{"request_put", put_op(k, value, 0, exists)}}}),
              json::array({{{"request_range", {{"key", base64_encode(k)}}}}}), of_key(op, key));
      if (answer.value("succeeded", false)) return value;
      const json* kv = failure_kv(answer);
      json reread;
      if (attempt > 0) {
        // Lost a race to another writer of the key: without jittered backoff N
        // contenders retry in lockstep and one join costs O(N) txns.
        std::this_thread::sleep_for(backoff.next());
        reread = call("/v3/kv/range", {{"key", base64_encode(k)}}, of_key(op, key));
        const auto kvs = reread.find("kvs");
        kv = kvs == reread.end() || kvs->empty() ? nullptr : &(*kvs)[0];
      }
      exists = kv != nullptr;
      if (exists) {
        const auto current = get_bytes(*kv, "value");
        value = next(&current);
        cmp = compare(k, "MOD", "mod_revision", std::to_string(get_i64(*kv, "mod_revision")));
      } else {
        value = next(nullptr);
        cmp = version_is_zero(k);
      }
    }
  }

  // A count of every key under the store's prefix (its header carries the revision).
  json count_all() {
    return call("/v3/kv/range",
                {{"key", base64_encode(scan_start(prefix))},
                 {"range_end", base64_encode(prefix_end(prefix))},
                 {"count_only", true}},
                "count of keys under '" + prefix + "'");
  }
  Revision current_revision() { return header_revision(count_all()); }

  std::string prefix;
  std::shared_ptr<EtcdClient> client;
};

EtcdStore::EtcdStore(EtcdStoreOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {}
EtcdStore::~EtcdStore() = default;

const EtcdStoreOptions& EtcdStore::options() const { return impl_->client->options(); }

void EtcdStore::ping() { num_keys(); }

Revision EtcdStore::set(const std::string& key, std::string_view value, LeaseId lease) {
  return header_revision(
      impl_->call("/v3/kv/put", put_op(impl_->full(key), value, lease), of_key("set", key)));
}

std::optional<std::string> EtcdStore::try_get(const std::string& key) {
  const auto answer =
      impl_->call("/v3/kv/range", {{"key", base64_encode(impl_->full(key))}}, of_key("get", key));
  const auto kvs = answer.find("kvs");
  if (kvs == answer.end() || kvs->empty()) return std::nullopt;
  return get_bytes((*kvs)[0], "value");
}

std::string EtcdStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  const auto deadline = timeout.count() < 0 ? Deadline::never() : Deadline::after(timeout);
  for (;;) {
    const auto answer =
        impl_->call("/v3/kv/range", {{"key", base64_encode(impl_->full(key))}}, of_key("get", key));
    const auto kvs = answer.find("kvs");
    if (kvs != answer.end() && !kvs->empty()) return get_bytes((*kvs)[0], "value");
    std::string value;
    const auto outcome = impl_->wait_for_put(key, header_revision(answer) + 1, deadline, &value);
    if (outcome == Impl::WaitOutcome::kPut) return value;
    // A watch that ended (history compacted, etcd lost) is retried from a fresh read.
    if (outcome == Impl::WaitOutcome::kTimedOut || deadline.expired())
      throw TimeoutError("get of key '" + key + "' in etcd: timed out after " +
                         std::to_string(timeout.count()) + " ms");
  }
}

std::int64_t EtcdStore::add(const std::string& key, std::int64_t delta) {
  const auto text = impl_->read_modify_write(key, "add", [&](const std::string* current) {
    std::int64_t now = 0;
    if (current != nullptr && !parse_decimal(*current, now))
      throw StoreError("add of key '" + key + "': value is not a number");
    std::int64_t result = 0;
    if (__builtin_add_overflow(now, delta, &result))
      throw StoreError("add of key '" + key + "': value is not a number (int64 overflow)");
    return std::to_string(result);
  });
  std::int64_t result = 0;
  parse_decimal(text, result);
  return result;
}

std::int64_t EtcdStore::append(const std::string& key, std::string_view value) {
  const auto text = impl_->read_modify_write(key, "append", [&](const std::string* current) {
    return (current != nullptr ? *current : std::string()) + std::string(value);
  });
  return static_cast<std::int64_t>(text.size());
}

std::string EtcdStore::compare_set(const std::string& key, std::string_view expected,
                                   std::string_view desired, LeaseId lease) {
  const auto k = impl_->full(key);
  // torch: a missing key is created only when the caller expected "nothing".
  json cmp = expected.empty() ? version_is_zero(k) : compare(k, "VALUE", "value", base64_encode(expected));
  for (;;) {
    const auto answer = impl_->txn(
        json::array({cmp}), json::array({{{"request_put", put_op(k, desired, lease)}}}),
        json::array({{{"request_range", {{"key", base64_encode(k)}}}}}), of_key("compare_set", key));
    if (answer.value("succeeded", false)) return std::string(desired);
    const json* kv = failure_kv(answer);
    if (kv == nullptr) {
      if (!expected.empty()) return std::string(expected);
      cmp = version_is_zero(k);  // it was deleted meanwhile: create it
      continue;
    }
    auto current = get_bytes(*kv, "value");
    if (current != expected) return current;
    // An existing empty value with empty `expected`: swap on this exact version.
    cmp = compare(k, "MOD", "mod_revision", std::to_string(get_i64(*kv, "mod_revision")));
  }
}

bool EtcdStore::remove(const std::string& key) {
  const auto answer =
      impl_->call("/v3/kv/deleterange", {{"key", base64_encode(impl_->full(key))}}, of_key("delete", key));
  return get_i64(answer, "deleted") > 0;
}

bool EtcdStore::check(const std::vector<std::string>& keys) {
  const auto found = impl_->range_many(keys, true, nullptr, "check");
  return std::all_of(found.begin(), found.end(), [](const auto& v) { return v.has_value(); });
}

std::vector<std::optional<std::string>> EtcdStore::multi_get(const std::vector<std::string>& keys) {
  return impl_->range_many(keys, false, nullptr, "multi_get");
}

void EtcdStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = timeout.count() < 0 ? Deadline::never() : Deadline::after(timeout);
  for (;;) {
    Revision revision = 0;
    const auto found = impl_->range_many(keys, true, &revision, "wait");
    std::vector<std::string> missing;
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (!found[i]) missing.push_back(keys[i]);
    if (missing.empty()) return;
    const auto outcome = impl_->wait_for_put(missing.front(), revision + 1, deadline, nullptr);
    if (outcome == Impl::WaitOutcome::kTimedOut ||
        (outcome == Impl::WaitOutcome::kWatchEnded && deadline.expired())) {
      std::string names;
      for (const auto& m : missing) names += (names.empty() ? "'" : ", '") + m + "'";
      throw TimeoutError("wait for keys " + names + " in etcd: timed out after " +
                         std::to_string(timeout.count()) + " ms");
    }
  }
}

Revision EtcdStore::multi_set(const std::vector<std::pair<std::string, std::string>>& kvs, LeaseId lease) {
  if (kvs.empty()) return impl_->current_revision();
  Revision revision = 0;
  for (std::size_t begin = 0; begin < kvs.size(); begin += kMaxTxnOps) {
    const auto end = std::min(kvs.size(), begin + kMaxTxnOps);
    json ops = json::array();
    for (auto i = begin; i < end; ++i)
      ops.push_back({{"request_put", put_op(impl_->full(kvs[i].first), kvs[i].second, lease)}});
    revision = header_revision(
        impl_->txn(json::array(), std::move(ops), json::array(), of_key("multi_set", kvs[begin].first)));
  }
  return revision;
}

std::int64_t EtcdStore::num_keys() { return get_i64(impl_->count_all(), "count"); }

ListResult EtcdStore::list(const std::string& prefix) {
  const auto p = impl_->full(prefix);
  const auto answer =
      impl_->call("/v3/kv/range",
                  {{"key", base64_encode(Impl::scan_start(p))}, {"range_end", base64_encode(prefix_end(p))}},
                  "list of prefix '" + prefix + "'");
  ListResult out;
  out.revision = header_revision(answer);
  if (const auto kvs = answer.find("kvs"); kvs != answer.end()) {
    out.kvs.reserve(kvs->size());
    for (const auto& kv : *kvs) {
      auto key = get_bytes(kv, "key");
      key.erase(0, std::min(impl_->prefix.size(), key.size()));
      out.kvs.push_back({std::move(key), get_bytes(kv, "value"), get_i64(kv, "mod_revision")});
    }
  }
  return out;
}

namespace {
json count_range(const std::string& full_prefix, Revision revision) {
  json range = {{"key", base64_encode(full_prefix.empty() ? std::string(1, '\0') : full_prefix)},
                {"range_end", base64_encode(prefix_end(full_prefix))},
                {"count_only", true}};
  if (revision > 0) range["revision"] = std::to_string(revision);
  return {{"request_range", std::move(range)}};
}
}  // namespace

EtcdStore::Counts EtcdStore::create(const std::string& key, std::string_view value, LeaseId lease,
                                    const std::vector<std::string>& count_prefixes,
                                    const std::vector<BatchOp>& also_put) {
  const auto k = impl_->full(key);
  json ops = json::array({{{"request_put", put_op(k, value, lease)}}});
  // Reads after a write in one txn see it: the counts are as of this create.
  for (const auto& p : count_prefixes) ops.push_back(count_range(impl_->full(p), 0));
  // After the counts, so that the responses' indexes above stay as they are.
  for (const auto& op : also_put)
    ops.push_back({{"request_put", put_op(impl_->full(op.key), op.value, op.lease)}});
  const auto answer =
      impl_->txn(json::array({version_is_zero(k)}), std::move(ops),
                 json::array({{{"request_range", {{"key", base64_encode(k)}}}}}), of_key("create", key));
  if (!answer.value("succeeded", false)) {
    const json* kv = failure_kv(answer);
    // The compare and the range run in one txn: the key cannot vanish between them.
    if (kv == nullptr)
      throw StoreError("create of key '" + key + "': etcd answered without the existing key");
    const auto revision = get_i64(*kv, "create_revision");
    if (count_prefixes.empty()) return Counts{{}, revision};
    return count_at(count_prefixes, revision);
  }
  Counts out;
  out.revision = header_revision(answer);
  const auto& responses = answer.value("responses", json::array());
  for (std::size_t i = 0; i < count_prefixes.size(); ++i)
    out.counts.push_back(get_i64(responses.at(i + 1).value("response_range", json::object()), "count"));
  return out;
}

EtcdStore::Counts EtcdStore::count_at(const std::vector<std::string>& prefixes, Revision revision) {
  json ops = json::array();
  for (const auto& prefix : prefixes) ops.push_back(count_range(impl_->full(prefix), revision));
  const auto answer =
      impl_->txn(json::array(), std::move(ops), json::array(),
                 "count of prefix '" + (prefixes.empty() ? std::string() : prefixes.front()) + "'");
  Counts out;
  out.revision = revision > 0 ? revision : header_revision(answer);
  const auto& responses = answer.value("responses", json::array());
  for (std::size_t i = 0; i < prefixes.size(); ++i)
    out.counts.push_back(get_i64(responses.at(i).value("response_range", json::object()), "count"));
  return out;
}

std::vector<std::string> EtcdStore::keys_created(const std::string& prefix, Revision max_create_revision,
                                                 Revision at_revision) {
  const auto p = impl_->full(prefix);
  json range = {{"key", base64_encode(Impl::scan_start(p))},
                {"range_end", base64_encode(prefix_end(p))},
                {"keys_only", true}};
  if (max_create_revision > 0) range["max_create_revision"] = std::to_string(max_create_revision);
  if (at_revision > 0) range["revision"] = std::to_string(at_revision);
  const auto answer = impl_->call("/v3/kv/range", range, "list of prefix '" + prefix + "'");
  std::vector<std::string> out;
  if (const auto kvs = answer.find("kvs"); kvs != answer.end()) {
    out.reserve(kvs->size());
    for (const auto& kv : *kvs) {
      auto key = get_bytes(kv, "key");
      key.erase(0, std::min(impl_->prefix.size(), key.size()));
      out.push_back(std::move(key));
    }
  }
  return out;
}

LeaseId EtcdStore::lease_grant(std::chrono::milliseconds ttl) {
  if (ttl.count() <= 0)
    throw StoreError("lease_grant needs a ttl > 0 ms, got " + std::to_string(ttl.count()));
  // etcd counts whole seconds: round up so a lease never lives shorter than
  // asked (saturating: milliseconds::max() + 999 would wrap negative).
  const auto seconds = saturating_add<std::int64_t>(ttl.count(), 999) / 1000;
  const auto answer = impl_->call("/v3/lease/grant", {{"TTL", std::to_string(seconds)}},
                                  "lease grant of " + std::to_string(seconds) + " s");
  if (const auto error = answer.value("error", std::string()); !error.empty())
    throw StoreError("etcd refused a lease of " + std::to_string(seconds) + " s: " + error);
  return get_i64(answer, "ID");
}

void EtcdStore::lease_keepalive(LeaseId lease) {
  // The gateway answers the keepalive stream with one {"result": ...} line.
  const auto answer = impl_->call("/v3/lease/keepalive", {{"ID", std::to_string(lease)}},
                                  "keepalive of lease " + std::to_string(lease));
  const auto& result = answer.value("result", json::object());
  if (get_i64(result, "TTL") <= 0)
    throw StoreError("lease " + std::to_string(lease) + " not found in etcd (expired or revoked)");
}

void EtcdStore::lease_revoke(LeaseId lease) {
  impl_->call("/v3/lease/revoke", {{"ID", std::to_string(lease)}},
              "revoke of lease " + std::to_string(lease));
}

std::unique_ptr<WatchHandle> EtcdStore::watch(const std::string& prefix, Revision from_revision,
                                              WatchCallback on_event, WatchErrorCallback on_error) {
  const auto p = impl_->full(prefix);
  return std::make_unique<EtcdWatch>(impl_->client, Impl::scan_start(p), prefix_end(p), from_revision,
                                     impl_->prefix.size(), std::move(on_event), std::move(on_error));
}

}  // namespace ddp::store
