// TcpStore's Store methods: each builds one request, and turns the reply's status
// into a value or an exception that names the endpoint and the key(s).
#include "ddp/store/tcp_store.hpp"

#include <algorithm>

#include "ddp/common/error.hpp"
#include "ddp/common/parse.hpp"
#include "ddp/common/time_bounds.hpp"
#include "tcp_store_impl.hpp"

namespace ddp::store {

namespace {

std::string quote_keys(const std::vector<std::string>& keys) {
  // Enough to act on without flooding a terminal with 10,000 keys.
  constexpr std::size_t kShown = 5;
  std::string out;
  for (std::size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i > 0) out += ", ";
    out += "'" + keys[i] + "'";
  }
  if (keys.size() > kShown) out += " and " + std::to_string(keys.size() - kShown) + " more";
  return out;
}

std::string subject(const Request& req) {
  switch (req.op) {
    case Op::kLeaseKeepAlive:
    case Op::kLeaseRevoke:
      return "lease " + std::to_string(req.a);
    case Op::kList:
    case Op::kCount:
    case Op::kWatch:
      return "prefix '" + (req.keys.empty() ? std::string() : req.keys[0]) + "'";
    default:
      if (req.keys.empty()) return "";
      return (req.keys.size() == 1 ? "key " : "keys ") + quote_keys(req.keys);
  }
}

[[noreturn]] void raise(const Request& req, const Response& resp, const std::string& where) {
  const std::string what = subject(req);
  const std::string detail = resp.message.empty() ? "" : ": " + resp.message;
  switch (resp.status) {
    case Status::kTimeout:
      throw TimeoutError(std::string(op_name(req.op)) + " timed out after " + std::to_string(req.b) +
                         " ms waiting for " + what + " at store " + where);
    case Status::kLeaseNotFound:
      throw StoreError("lease " + std::to_string(req.a) + " not found at store " + where +
                       " (expired or revoked)");
    case Status::kShuttingDown:
      throw NetworkError("store at " + where + " is shutting down");
    default:
      throw StoreError(std::string(op_name(req.op)) + (what.empty() ? "" : " of " + what) +
                       " failed at store " + where + ": " + status_name(resp.status) + detail);
  }
}

const Item& first_item(const Request& req, const Response& resp, const std::string& where) {
  if (resp.items.empty()) {
    throw ProtocolError("store at " + where + " answered " + op_name(req.op) + " without an item");
  }
  return resp.items.front();
}

std::int64_t to_ms(std::chrono::milliseconds t) { return t.count() < 0 ? -1 : t.count(); }

// How long the client waits for a get's or wait's reply: the server owns the
// timer, the grace covers its reply's trip back. Saturating: a caller's
// milliseconds::max() plus the grace would wrap to a wait in the past.
std::chrono::milliseconds reply_wait(std::int64_t timeout_ms, std::chrono::milliseconds grace) {
  if (timeout_ms < 0) return kNoTimeout;
  return std::chrono::milliseconds(saturating_add<std::int64_t>(timeout_ms, grace.count()));
}

// The longer of two reply waits, kNoTimeout (forever) the longest.
std::chrono::milliseconds longest(std::chrono::milliseconds a, std::chrono::milliseconds b) {
  if (a.count() < 0 || b.count() < 0) return kNoTimeout;
  return std::max(a, b);
}

}  // namespace

TcpStore::TcpStore(TcpStoreOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {
  impl_->start();
}

TcpStore::~TcpStore() { impl_->shutdown(); }

const Endpoint& TcpStore::endpoint() const { return impl_->options().endpoint; }

void TcpStore::on_reconnect(std::function<void()> fn) { impl_->set_on_reconnect(std::move(fn)); }

namespace {
// Sends a request with the client's request timeout and raises on any status but kOk.
// A template because TcpStore::Impl is private to TcpStore; only members name it.
template <typename ImplT>
Response simple(ImplT& impl, Request req) {
  auto resp = impl.call(req, impl.options().request_timeout);
  if (resp.status != Status::kOk) raise(req, resp, impl.where());
  return resp;
}

Request make(Op op, std::vector<std::string> keys = {}, std::vector<std::string> values = {}) {
  Request req;
  req.op = op;
  req.keys = std::move(keys);
  req.values = std::move(values);
  return req;
}
}  // namespace

Revision TcpStore::set(const std::string& key, std::string_view value, LeaseId lease) {
  auto req = make(Op::kSet, {key}, {std::string(value)});
  req.a = lease;
  return simple(*impl_, std::move(req)).revision;
}

std::string TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  auto req = make(Op::kGet, {key});
  req.b = to_ms(timeout);
  const auto wait = reply_wait(req.b, impl_->options().request_timeout);
  auto resp = impl_->call(req, wait);
  if (resp.status != Status::kOk) raise(req, resp, impl_->where());
  first_item(req, resp, impl_->where());
  return std::move(resp.items.front().value);
}

std::optional<std::string> TcpStore::try_get(const std::string& key) {
  auto req = make(Op::kTryGet, {key});
  auto resp = impl_->call(req, impl_->options().request_timeout);
  if (resp.status == Status::kNotFound) return std::nullopt;
  if (resp.status != Status::kOk) raise(req, resp, impl_->where());
  return first_item(req, resp, impl_->where()).value;
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) {
  auto req = make(Op::kAdd, {key});
  req.b = delta;
  return simple(*impl_, std::move(req)).num;
}

std::string TcpStore::compare_set(const std::string& key, std::string_view expected, std::string_view desired,
                                  LeaseId lease) {
  auto req = make(Op::kCompareSet, {key}, {std::string(expected), std::string(desired)});
  req.a = lease;
  auto resp = simple(*impl_, req);
  return first_item(req, resp, impl_->where()).value;
}

bool TcpStore::remove(const std::string& key) { return simple(*impl_, make(Op::kDelete, {key})).num > 0; }

bool TcpStore::check(const std::vector<std::string>& keys) {
  return simple(*impl_, make(Op::kCheck, keys)).num == 1;
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  auto req = make(Op::kWait, keys);
  req.b = to_ms(timeout);
  const auto wait = reply_wait(req.b, impl_->options().request_timeout);
  auto resp = impl_->call(req, wait);
  if (resp.status != Status::kOk) raise(req, resp, impl_->where());
}

std::vector<std::optional<std::string>> TcpStore::multi_get(const std::vector<std::string>& keys) {
  auto req = make(Op::kMultiGet, keys);
  auto resp = simple(*impl_, req);
  if (resp.items.size() != keys.size()) {
    throw ProtocolError("store at " + impl_->where() + " answered multi_get of " +
                        std::to_string(keys.size()) + " keys with " + std::to_string(resp.items.size()) +
                        " items");
  }
  std::vector<std::optional<std::string>> out;
  out.reserve(keys.size());
  for (auto& item : resp.items) {
    if (item.kind == ItemKind::kMissing) {
      out.emplace_back(std::nullopt);
    } else {
      out.emplace_back(std::move(item.value));
    }
  }
  return out;
}

Revision TcpStore::multi_set(const std::vector<std::pair<std::string, std::string>>& kvs, LeaseId lease) {
  auto req = make(Op::kMultiSet);
  req.a = lease;
  req.keys.reserve(kvs.size());
  req.values.reserve(kvs.size());
  for (const auto& [k, v] : kvs) {
    req.keys.push_back(k);
    req.values.push_back(v);
  }
  return simple(*impl_, std::move(req)).revision;
}

std::int64_t TcpStore::append(const std::string& key, std::string_view value) {
  return simple(*impl_, make(Op::kAppend, {key}, {std::string(value)})).num;
}

std::int64_t TcpStore::queue_push(const std::string& queue, std::string_view value) {
  return simple(*impl_, make(Op::kQueuePush, {queue}, {std::string(value)})).num;
}

std::int64_t TcpStore::queue_len(const std::string& queue) {
  return simple(*impl_, make(Op::kQueueLen, {queue})).num;
}

std::int64_t TcpStore::num_keys() { return simple(*impl_, make(Op::kNumKeys)).num; }

ListResult TcpStore::list(const std::string& prefix) {
  auto resp = simple(*impl_, make(Op::kList, {prefix}));
  ListResult out;
  out.revision = resp.revision;
  out.kvs.reserve(resp.items.size());
  for (auto& item : resp.items) {
    out.kvs.push_back(KeyValue{std::move(item.key), std::move(item.value), item.revision});
  }
  return out;
}

std::vector<ChildCount> TcpStore::count_children(const std::string& prefix) {
  auto req = make(Op::kCount, {prefix});
  req.a = kCountByChild;
  auto resp = simple(*impl_, std::move(req));
  std::vector<ChildCount> out;
  out.reserve(resp.items.size());
  for (auto& item : resp.items) {
    const auto n = parse_int<std::int64_t>(item.value);
    if (!n || *n < 0) throw ProtocolError("count: the server's count for '" + item.key + "' is not a number");
    out.push_back({std::move(item.key), *n});
  }
  return out;
}

void TcpStore::batch(std::vector<BatchOp>& ops) {
  if (ops.empty()) return;
  std::vector<Request> reqs;
  reqs.reserve(ops.size());
  auto reply_timeout = impl_->options().request_timeout;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const auto& op = ops[i];
    switch (op.kind) {
      case BatchOp::Kind::kSet:
        reqs.push_back(make(Op::kSet, {op.key}, {op.value}));
        reqs.back().a = op.lease;
        // Only before a later request, whose answer then says it succeeded.
        if (op.quiet && i + 1 < ops.size()) reqs.back().b = kSetQuiet;
        break;
      case BatchOp::Kind::kCompareSet:
        reqs.push_back(make(Op::kCompareSet, {op.key}, {op.expected, op.value}));
        reqs.back().a = op.lease;
        break;
      case BatchOp::Kind::kAdd:
        reqs.push_back(make(Op::kAdd, {op.key}));
        reqs.back().b = op.delta;
        break;
      case BatchOp::Kind::kTryGet:
        reqs.push_back(make(Op::kTryGet, {op.key}));
        break;
      case BatchOp::Kind::kGet:
        reqs.push_back(make(Op::kGet, {op.key}));
        reqs.back().b = to_ms(op.wait);
        reply_timeout = longest(reply_timeout, reply_wait(reqs.back().b, impl_->options().request_timeout));
        break;
      case BatchOp::Kind::kLeaseGrant:
        reqs.push_back(make(Op::kLeaseGrant));
        reqs.back().b = op.wait.count();
        if (impl_->options().bind_leases_to_connection) reqs.back().a = kLeaseBindToConnection;
        break;
    }
  }
  auto replies = impl_->call_batch(reqs, reply_timeout);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    auto& op = ops[i];
    const auto& resp = replies[i];
    try {
      if (op.kind == BatchOp::Kind::kTryGet && resp.status == Status::kNotFound) continue;
      if (resp.status != Status::kOk) raise(reqs[i], resp, impl_->where());
      switch (op.kind) {
        case BatchOp::Kind::kCompareSet:
        case BatchOp::Kind::kTryGet:
        case BatchOp::Kind::kGet:
          op.result = first_item(reqs[i], resp, impl_->where()).value;
          op.found = op.kind != BatchOp::Kind::kCompareSet;
          break;
        case BatchOp::Kind::kSet:
          op.number = resp.revision;
          break;
        case BatchOp::Kind::kAdd:
        case BatchOp::Kind::kLeaseGrant:
          op.number = resp.num;
          break;
      }
    } catch (const NetworkError&) {
      throw;
    } catch (...) {
      op.error = std::current_exception();
    }
  }
}

LeaseId TcpStore::lease_grant(std::chrono::milliseconds ttl) {
  auto req = make(Op::kLeaseGrant);
  req.b = ttl.count();
  if (impl_->options().bind_leases_to_connection) req.a = kLeaseBindToConnection;
  return simple(*impl_, std::move(req)).num;
}

void TcpStore::lease_keepalive(LeaseId lease) {
  auto req = make(Op::kLeaseKeepAlive);
  req.a = lease;
  simple(*impl_, std::move(req));
}

void TcpStore::lease_revoke(LeaseId lease) {
  auto req = make(Op::kLeaseRevoke);
  req.a = lease;
  simple(*impl_, std::move(req));
}

namespace {
// Holds the store weakly: a handle may outlive its TcpStore.
template <typename ImplT>
std::unique_ptr<WatchHandle> handle_of(const std::shared_ptr<ImplT>& impl,
                                       std::shared_ptr<WatchState> state) {
  std::weak_ptr<ImplT> weak = impl;
  return make_watch_handle([weak, state] {
    if (auto locked = weak.lock()) locked->cancel_watch(state);
    state->cancelled = true;
  });
}
}  // namespace

std::unique_ptr<WatchHandle> TcpStore::watch(const std::string& prefix, Revision from_revision,
                                             WatchCallback on_event, WatchErrorCallback on_error) {
  return handle_of(impl_,
                   impl_->start_watch(prefix, from_revision, std::move(on_event), std::move(on_error)));
}

std::vector<std::unique_ptr<WatchHandle>> TcpStore::watch_all(std::vector<WatchSpec> specs) {
  std::vector<std::unique_ptr<WatchHandle>> handles;
  if (specs.empty()) return handles;
  for (auto& state : impl_->start_watches(specs)) handles.push_back(handle_of(impl_, std::move(state)));
  return handles;
}

std::map<std::string, std::string> TcpStore::stat() {
  auto resp = simple(*impl_, make(Op::kStat));
  std::map<std::string, std::string> out;
  for (auto& item : resp.items) out[std::move(item.key)] = std::move(item.value);
  return out;
}

std::vector<KeyValue> TcpStore::jobs(const std::string& run_id, bool* truncated) {
  auto resp =
      simple(*impl_, make(Op::kJobs, run_id.empty() ? std::vector<std::string>{} : std::vector{run_id}));
  if (truncated) *truncated = resp.message == "truncated";
  std::vector<KeyValue> out;
  out.reserve(resp.items.size());
  for (auto& item : resp.items) out.push_back({std::move(item.key), std::move(item.value), item.revision});
  return out;
}

void TcpStore::ping() { simple(*impl_, make(Op::kPing)); }

}  // namespace ddp::store
