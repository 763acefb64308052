#include "dispatcher.hpp"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <charconv>
#include <optional>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::store::server {
namespace asio = boost::asio;

namespace {

// How long a graceful stop waits for sessions to take their last replies.
constexpr std::chrono::seconds kShutdownGrace{2};
// Compaction retries after a failure: 1 s, doubling up to 60 s.
constexpr std::chrono::milliseconds kCompactBackoffFirst{1000};
constexpr std::chrono::milliseconds kCompactBackoffMax{60000};
// While degraded: how often the data dir is probed, and how long lease expiry
// waits before writing its deletion again.
constexpr std::chrono::milliseconds kDiskProbeInterval{1000};
// Past this many leases revoked at once, one summary log line instead of one
// per lease: a whole cluster disconnecting must not flood the journal.
constexpr std::size_t kLeaseLogLines = 16;
// Leases due within this window of the first are reaped together, in one
// mutation: after a power loss or a partition the agents' last keepalives are
// spread over their keepalive interval, and reaping each lease on its own
// would send every watcher one frame per lease. A lease goes at most this
// late; against a TTL of seconds (15 s for agents) that is noise.
constexpr Millis kLeaseExpiryBatch{100};

bool same_token(std::string_view a, std::string_view b) {
  // Constant time in the token's length, so response timing does not leak a prefix.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const auto n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const auto ca = i < a.size() ? a[i] : '\0';
    const auto cb = i < b.size() ? b[i] : '\0';
    diff |= static_cast<unsigned char>(ca ^ cb);
  }
  return diff == 0;
}

std::size_t encoded_size(const Response& r) {
  std::size_t n = 4 + 4 + 1 + 8 + 8 + 4 + r.message.size() + 4;
  for (const auto& it : r.items) n += 1 + 4 + it.key.size() + 4 + it.value.size() + 8;
  return n;
}

}  // namespace

Dispatcher::Dispatcher(asio::io_context& io, const StoreServerOptions& options)
    : io_(io),
      options_(options),
      core_(HistoryLimits{
          options.history_max_events != 0 ? options.history_max_events : HistoryLimits::kDefaultMaxEvents,
          options.history_max_bytes != 0 ? options.history_max_bytes : HistoryLimits::kDefaultMaxBytes}),
      preauth_(options.max_preauth_buffered_bytes),
      reclaimer_(ReclaimOptions{options.keep_rounds, options.reclaim_idle_jobs}),
      reclaim_timer_(io),
      waiter_timer_(io),
      lease_timer_(io),
      grace_timer_(io),
      auth_log_timer_(io),
      auth_(AuthBackoff{options.auth_free_failures, options.auth_backoff_base, options.auth_backoff_max}),
      disk_timer_(io) {
  core_.set_expiry_batch(kLeaseExpiryBatch);
  core_.set_sink([this](const Mutation& m) {
    // Before the response exists: an acknowledged write is in the log.
    if (persistence_) persistence_->append(m);
    committed_.push_back(m);
  });
}

Dispatcher::~Dispatcher() = default;

void Dispatcher::open_persistence() {
  if (!options_.data_dir.empty()) {
    persistence_ = std::make_unique<Persistence>(options_.data_dir, Persistence::kDefaultCompactBytes,
                                                 options_.recover_corrupt_log);
    persistence_->open(core_, Clock::now());
  }
  arm_reclaim_sweep();
}

void Dispatcher::arm_reclaim_sweep() {
  const auto period = reclaimer_.sweep_period();
  if (period.count() == 0 || stopping_) return;
  reclaim_timer_.expires_after(period);
  reclaim_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || stopping_) return;
    auto keys = reclaimer_.idle_jobs(core_.kv(), Clock::now());
    reclaim_keys_.insert(reclaim_keys_.end(), keys.begin(), keys.end());
    after_work();
    arm_reclaim_sweep();
  });
}

void Dispatcher::reclaim() {
  if (reclaim_keys_.empty() || stopping_) return;
  auto keys = std::exchange(reclaim_keys_, {});
  try {
    const auto n = core_.erase_keys(keys);
    reclaimer_.count_reclaimed(n);
    ddp::log::get("store.server")->debug("reclaimed keys of old rounds and finished jobs count={}", n);
  } catch (const std::exception& e) {
    // Not in the log, so not deleted; the next round close or sweep names them again.
    ddp::log::get("store.server")
        ->warn("reclaiming keys failed count={} error=\"{}\"", keys.size(), e.what());
  }
}

void Dispatcher::add_session(const std::shared_ptr<Session>& session) { sessions_[session.get()] = session; }

std::map<std::string, std::int64_t> Dispatcher::stats() const {
  return {{"connections", static_cast<std::int64_t>(sessions_.size())},
          {"keys", static_cast<std::int64_t>(core_.kv().size())},
          {"leases", static_cast<std::int64_t>(core_.leases().size())},
          {"watches", static_cast<std::int64_t>(hub_.size())},
          {"waiters", static_cast<std::int64_t>(waiters_.size())},
          {"revision", core_.revision()},
          {"requests", requests_},
          {"event_frames", event_frames_},
          {"reclaimed_keys", reclaimer_.reclaimed_keys()},
          {"reclaimed_jobs", reclaimer_.reclaimed_jobs()},
          {"degraded", persistence_ && persistence_->degraded() ? 1 : 0},
          {"persist_failures", persistence_ ? static_cast<std::int64_t>(persistence_->write_failures()) : 0},
          {"compaction_failures", compaction_failures_}};
}

std::map<std::string, std::int64_t> Dispatcher::metrics() const {
  auto out = stats();
  out["history_bytes"] = static_cast<std::int64_t>(core_.history().bytes());
  out["auth_failures"] = auth_failures_;
  out["unauthenticated_connections"] = static_cast<std::int64_t>(preauth_.size());
  out["unauthenticated_bytes"] = static_cast<std::int64_t>(preauth_.bytes());
  out["unauthenticated_closed"] = static_cast<std::int64_t>(preauth_.closed());
  request_metrics_.append_to(out);
  append_rendezvous_rounds(core_.kv(), out);
  return out;
}

void Dispatcher::on_request(const std::shared_ptr<Session>& s, Request&& req) {
  ++requests_;
  const auto started = std::chrono::steady_clock::now();
  const auto op = req.op;
  struct Record {  // also on the catch path below
    RequestMetrics& m;
    Op op;
    std::chrono::steady_clock::time_point started;
    ~Record() { m.record(op, std::chrono::steady_clock::now() - started); }
  } record{request_metrics_, op, started};
  try {
    dispatch(s, req);
    after_work();
  } catch (const PersistError& e) {
    // Not in the log, so not applied either (StoreCore undid it): the client may retry.
    ddp::log::get("store.server")
        ->warn("write refused: data dir degraded op={} peer={} error=\"{}\"", op_name(req.op), s->peer(),
               e.what());
    s->send(reply(req.id, Status::kInternal,
                  std::string("not saved, nothing changed: ") + e.what() +
                      "; the server refuses writes until its "
                      "data dir takes them again"));
    after_work();
  } catch (const std::exception& e) {
    // A bug: this request fails, the server goes on.
    ddp::log::get("store.server")
        ->error("request failed op={} peer={} error=\"{}\"", server_op_name(req.op), s->peer(), e.what());
    s->send(reply(req.id, Status::kInternal, e.what()));
    after_work();
  }
}

void Dispatcher::dispatch(const std::shared_ptr<Session>& s, Request& req) {
  if (!s->hello_done()) {
    if (req.op == Op::kHello) return handle_hello(s, req);
    ddp::log::get("store.server")
        ->warn("closing connection: {} before hello peer={}", op_name(req.op), s->peer());
    s->close("request before hello");
    return;
  }
  if (stopping_) return s->send(reply(req.id, Status::kShuttingDown, "server is shutting down"));
  switch (req.op) {
    case Op::kHello:
      return s->send(reply(req.id, Status::kBadRequest, "hello sent twice"));
    case Op::kGet:
    case Op::kWait:
      return handle_blocking(s, req);
    case Op::kWatch:
      return handle_watch(s, req);
    case Op::kCancel:
      return handle_cancel(s, req);
    case Op::kBarrier:
      return handle_barrier(s, req);
    default:
      if (is_queue_op(req.op)) return handle_queue(s, req);
      break;
  }
  auto resp = core_.execute(req, Clock::now());
  if (req.op == Op::kCheck && resp.num == 0 && !queues_.empty())
    resp.num = still_missing(req).empty() ? 1 : 0;
  if (req.op == Op::kLeaseGrant && resp.status == Status::kOk && (req.a & kLeaseBindToConnection) != 0) {
    bound_leases_[s.get()].push_back(resp.num);
  }
  if (req.op == Op::kStat) {
    for (const auto& [name, value] : stats()) {
      if (name == "keys" || name == "leases" || name == "revision") continue;  // core's own
      resp.items.push_back({ItemKind::kPresent, name, std::to_string(value), 0});
    }
  }
  if (!resp.items.empty() && encoded_size(resp) > options_.limits.max_frame_bytes) {
    resp = reply(req.id, Status::kLimitExceeded,
                 "response of " + std::to_string(encoded_size(resp)) + " bytes exceeds max_frame_bytes " +
                     std::to_string(options_.limits.max_frame_bytes) + "; ask for fewer keys");
  }
  s->send(resp);
}

void Dispatcher::handle_hello(const std::shared_ptr<Session>& s, const Request& req) {
  auto log = ddp::log::get("store.server");
  Response resp = reply(req.id, Status::kOk);
  resp.num = kProtocolVersion;
  resp.revision = core_.revision();
  if (req.a != static_cast<std::int64_t>(kProtocolVersion)) {
    resp.status = Status::kVersionMismatch;
    resp.message = "server speaks protocol version " + std::to_string(kProtocolVersion) + ", client sent " +
                   std::to_string(req.a) + "; use matching ddp versions";
    log->warn("closing connection: protocol version mismatch peer={} client_version={}", s->peer(), req.a);
    s->send(resp);
    s->close_after_flush();
    return;
  }
  if (!options_.token.empty()) {
    // Compared whatever the address's back-off: a guesser sharing the address
    // (a NAT, a host) must not lock out the client that has the token.
    const std::string_view given = req.values.empty() ? std::string_view() : std::string_view(req.values[0]);
    if (!same_token(given, options_.token)) {
      const auto now = Clock::now();
      auth_.record_failure(s->peer_address(), now);
      // Past the free failures the verdict is held: one guesser from an
      // address waits for each answer, 100 ms doubling up to the maximum.
      const auto hold = std::min(auth_.wait_for(s->peer_address(), now), options_.auth_backoff_max);
      resp.status = Status::kAuthFailed;
      resp.message = given.empty() ? "this server requires a token; pass --token-file"
                                   : "wrong token; check --token-file";
      if (hold > Millis::zero()) {
        auth_.record_delayed(s->peer_address());
        resp.message += " (too many failed authentication attempts from " + s->peer_address() +
                        ": this answer was held " + std::to_string(hold.count()) + " ms)";
      }
      log_auth_failure(*s, given.empty() ? "token=missing" : "token=wrong");
      s->send(resp);
      s->close_after_flush(hold);
      return;
    }
  }
  s->set_hello_done();
  s->send(resp);
}

void Dispatcher::log_auth_failure(const Session& s, const char* what) {
  ++auth_failures_;
  if (auth_period_open_) return;  // counted; the period's summary line reports it
  auth_period_open_ = true;
  auth_.take_summary();  // this one is logged here, not in the summary
  ddp::log::get("store.server")
      ->warn(
          "closing connection: authentication failed peer={} {}; further failures are summarised every {} ms",
          s.peer(), what, options_.auth_log_period.count());
  auth_log_timer_.expires_after(options_.auth_log_period);
  auth_log_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) on_auth_log_timer();
  });
}

void Dispatcher::on_auth_log_timer() {
  const auto sum = auth_.take_summary();
  if (sum.failed == 0) {
    auth_period_open_ = false;  // quiet: the next failure is logged at once
    return;
  }
  ddp::log::get("store.server")
      ->warn(
          "authentication failures in the last {} ms: failed={} delayed={} peers={} top_peer={} "
          "top_peer_count={}",
          options_.auth_log_period.count(), sum.failed, sum.delayed, sum.peers, sum.top_peer, sum.top_count);
  auth_log_timer_.expires_after(options_.auth_log_period);
  auth_log_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) on_auth_log_timer();
  });
}

bool Dispatcher::refuse_pending(const std::shared_ptr<Session>& s, const Request& req) {
  if (s->pending().count(req.id) != 0) {
    s->send(
        reply(req.id, Status::kBadRequest, "request id " + std::to_string(req.id) + " is already pending"));
    return true;
  }
  if (s->pending().size() >= options_.limits.max_pending_per_connection) {
    s->send(reply(req.id, Status::kLimitExceeded,
                  "more than " + std::to_string(options_.limits.max_pending_per_connection) +
                      " pending gets/waits/watches on one connection"));
    return true;
  }
  return false;
}

void Dispatcher::handle_blocking(const std::shared_ptr<Session>& s, Request& req) {
  const auto now = Clock::now();
  auto resp = core_.execute(req, now);
  if (resp.status == Status::kNotFound && req.op == Op::kWait && !queues_.empty() &&
      still_missing(req).empty()) {
    resp = reply(req.id, Status::kOk);
  }
  if (resp.status != Status::kNotFound) return s->send(resp);
  if (req.b == 0) {
    resp.status = Status::kTimeout;
    resp.message = "timed out after 0 ms";
    return s->send(resp);
  }
  park(s, req, still_missing(req), now);
}

void Dispatcher::park(const std::shared_ptr<Session>& s, Request& req, const std::vector<std::string>& keys,
                      Clock::time_point now) {
  if (refuse_pending(s, req)) return;
  // A timeout past the clock's range is forever, as a negative one.
  const auto deadline = req.b < 0 ? Clock::time_point::max() : saturating_add(now, Millis(req.b));
  const WaiterId id = next_handle_++;
  waiters_.add(id, keys, deadline);
  s->pending()[req.id] = {Pending::Kind::kWaiter, id};
  waiter_info_[id] = {s, std::move(req), deadline};
}

void Dispatcher::handle_barrier(const std::shared_ptr<Session>& s, Request& req) {
  if (req.keys.size() != 1) return s->send(reply(req.id, Status::kBadRequest, "barrier takes one key"));
  const auto now = Clock::now();
  Request arrive;
  arrive.op = Op::kAdd;
  arrive.keys = req.keys;
  arrive.b = 1;
  auto resp = core_.execute(arrive, now);
  resp.id = req.id;
  if (resp.status != Status::kOk || resp.num >= req.a) return s->send(resp);
  if (req.b == 0) return s->send(reply(req.id, Status::kTimeout, "barrier timed out after 0 ms"));
  park(s, req, req.keys, now);
}

std::optional<Response> Dispatcher::barrier_reached(const Request& req) {
  Request read;
  read.op = Op::kTryGet;
  read.keys = req.keys;
  const auto now = core_.execute(read, Clock::now());
  if (now.items.empty()) return std::nullopt;  // deleted: the next arrival starts it again
  const auto& text = now.items[0].value;
  std::int64_t count = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), count);
  if (ec != std::errc() || end != text.data() + text.size() || count < req.a) return std::nullopt;
  auto resp = reply(req.id, Status::kOk);
  resp.num = count;
  return resp;
}

void Dispatcher::release_waiter(WaiterId id) {
  auto it = waiter_info_.find(id);
  if (it == waiter_info_.end()) return;
  if (it->second.req.op == Op::kBarrier) {
    auto reached = barrier_reached(it->second.req);
    if (!reached) {  // another write to the counter, not yet the count: keep waiting
      waiters_.add(id, it->second.req.keys, it->second.deadline);
      return;
    }
    auto info = std::move(it->second);
    waiter_info_.erase(it);
    info.session->pending().erase(info.req.id);
    info.session->send(*reached);
    return;
  }
  auto resp = core_.execute(it->second.req, Clock::now());
  if (resp.status == Status::kNotFound && it->second.req.op == Op::kWait &&
      still_missing(it->second.req).empty()) {
    resp = reply(it->second.req.id, Status::kOk);  // a queue it waits on is not empty
  }
  if (resp.status == Status::kNotFound) {  // deleted again before we got here: keep waiting
    waiters_.add(id, still_missing(it->second.req), it->second.deadline);
    return;
  }
  auto info = std::move(it->second);
  waiter_info_.erase(it);
  info.session->pending().erase(info.req.id);
  info.session->send(resp);
}

void Dispatcher::handle_cancel(const std::shared_ptr<Session>& s, const Request& req) {
  auto resp = reply(req.id, Status::kOk);
  const auto target = static_cast<std::uint32_t>(req.a);
  auto it = s->pending().find(target);
  if (it != s->pending().end()) {
    if (it->second.kind == Pending::Kind::kWaiter) {
      waiters_.remove(it->second.handle);
      waiter_info_.erase(it->second.handle);
    } else {
      hub_.remove(it->second.handle);
      watch_info_.erase(it->second.handle);
    }
    s->pending().erase(it);
    s->send(reply(target, Status::kCancelled, "cancelled by the client"));
    resp.num = 1;
  }
  s->send(resp);
}

void Dispatcher::drain() {
  // Sends can close sessions (write queue full), which edits the maps: look ids
  // up afresh every time instead of holding iterators.
  const auto now = Clock::now();
  for (std::size_t m = 0; m < committed_.size(); ++m) {
    const auto mutation = std::move(committed_[m]);
    auto old = reclaimer_.on_commit(mutation, core_.kv(), now);
    reclaim_keys_.insert(reclaim_keys_.end(), std::make_move_iterator(old.begin()),
                         std::make_move_iterator(old.end()));
    for (const auto& c : mutation.changes) {
      if (c.kind != Change::Kind::kPut) continue;
      for (auto id : waiters_.on_put(c.key)) release_waiter(id);
    }
    if (hub_.size() == 0) continue;
    const auto events = events_of(mutation);
    for (const auto& route : hub_.route_by_prefix(events)) {
      // Built once for all the watchers of the prefix, not once per watcher.
      std::optional<std::vector<Response>> plain;
      std::optional<std::vector<Response>> runs;
      for (auto watch : route.watchers) {
        auto it = watch_info_.find(watch);
        if (it == watch_info_.end() || it->second.replay_from != 0) continue;  // replay reads it from history
        auto session = it->second.session;
        auto& built = it->second.delete_runs ? runs : plain;
        if (!built) built = event_frames(route.events, it->second.delete_runs);
        send_frames(*session, it->second.request_id, *built);
      }
    }
  }
  committed_.clear();
}

void Dispatcher::after_work() {
  auto log = ddp::log::get("store.server");
  try {
    drain();
    if (!reclaim_keys_.empty()) {
      reclaim();
      drain();
    }
  } catch (const std::exception& e) {
    log->error("delivering changes to waiters and watchers failed error=\"{}\"", e.what());
    committed_.clear();
  }
  maybe_compact();
  if (persistence_ && persistence_->degraded()) arm_disk_probe();
  try {
    rearm_timers();
  } catch (const std::exception& e) {
    log->error("rearming timers failed error=\"{}\"", e.what());
  }
}

void Dispatcher::maybe_compact() {
  if (!persistence_ || stopping_ || !persistence_->wants_compaction()) return;
  const auto now = std::chrono::steady_clock::now();
  if (now < compact_retry_at_) return;
  try {
    persistence_->compact(core_);
    compact_backoff_ = std::chrono::milliseconds(0);
  } catch (const std::exception& e) {
    ++compaction_failures_;
    compact_backoff_ = compact_backoff_.count() == 0 ? kCompactBackoffFirst
                                                     : std::min(compact_backoff_ * 2, kCompactBackoffMax);
    compact_retry_at_ = now + compact_backoff_;
    ddp::log::get("store.server")
        ->error("compaction failed; the log keeps growing, next try in {} ms error=\"{}\"",
                compact_backoff_.count(), e.what());
  }
}

void Dispatcher::arm_disk_probe() {
  if (disk_probe_armed_ || stopping_) return;
  disk_probe_armed_ = true;
  disk_timer_.expires_after(kDiskProbeInterval);
  disk_timer_.async_wait([this](boost::system::error_code ec) {
    disk_probe_armed_ = false;
    if (ec || stopping_ || !persistence_) return;
    if (persistence_->probe()) {
      lease_retry_at_.reset();
      compact_retry_at_ = {};
    }
    after_work();
  });
}

void Dispatcher::rearm_timers() {
  if (stopping_) return;
  rearm(waiter_timer_, waiter_armed_, waiters_.next_deadline(), &Dispatcher::on_waiter_timer);
  auto next_lease = core_.next_lease_expiry();
  if (next_lease) *next_lease = saturating_add(*next_lease, core_.expiry_batch());
  if (next_lease && lease_retry_at_ && *next_lease < *lease_retry_at_) next_lease = lease_retry_at_;
  rearm(lease_timer_, lease_armed_, next_lease, &Dispatcher::on_lease_timer);
}

void Dispatcher::rearm(boost::asio::steady_timer& timer, std::optional<Clock::time_point>& armed,
                       std::optional<Clock::time_point> next, void (Dispatcher::*fire)()) {
  if (next == armed) return;
  armed = next;
  if (!next) {
    timer.cancel();
    return;
  }
  timer.expires_at(*next);
  timer.async_wait([this, fire](boost::system::error_code ec) {
    if (!ec) (this->*fire)();
  });
}

void Dispatcher::on_waiter_timer() {
  waiter_armed_.reset();
  for (auto id : waiters_.take_expired(Clock::now())) {
    auto it = waiter_info_.find(id);
    if (it == waiter_info_.end()) continue;
    auto info = std::move(it->second);
    waiter_info_.erase(it);
    info.session->pending().erase(info.req.id);
    if (info.req.op == Op::kBarrier) {
      info.session->send(reply(info.req.id, Status::kTimeout,
                               "barrier on '" + info.req.keys[0] + "' timed out after " +
                                   std::to_string(info.req.b) + " ms; fewer than " +
                                   std::to_string(info.req.a) + " arrived"));
      continue;
    }
    auto missing = core_.missing(info.req.keys);
    std::string msg = std::string(op_name(info.req.op)) + " timed out after " + std::to_string(info.req.b) +
                      " ms; missing key(s):";
    for (std::size_t i = 0; i < missing.size() && i < 5; ++i) msg += " '" + missing[i] + "'";
    if (missing.size() > 5) msg += " and " + std::to_string(missing.size() - 5) + " more";
    info.session->send(reply(info.req.id, Status::kTimeout, msg));
  }
  after_work();
}

void Dispatcher::on_lease_timer() {
  lease_armed_.reset();
  try {
    const auto n = core_.expire_leases(Clock::now());
    lease_retry_at_.reset();
    if (n > 0) ddp::log::get("store.server")->debug("leases expired count={}", n);
  } catch (const std::exception& e) {
    // The lease stays (its keys too) until its deletion is in the log.
    lease_retry_at_ = Clock::now() + kDiskProbeInterval;
    ddp::log::get("store.server")
        ->error("lease expiry not saved; retrying in {} ms error=\"{}\"", kDiskProbeInterval.count(),
                e.what());
  }
  after_work();
}

void Dispatcher::on_closed(Session& s) {
  if (auto bound = bound_leases_.find(&s); bound != bound_leases_.end()) {
    for (auto id : bound->second) closed_leases_.emplace_back(id, s.peer());
    bound_leases_.erase(bound);
    // Revoked after this call returns, not inside the session's own close path,
    // and together with every other connection that closed in this loop turn.
    if (!stopping_ && !revoke_posted_) {
      revoke_posted_ = true;
      asio::post(io_, [this] { revoke_closed_leases(); });
    }
  }
  for (const auto& [request_id, p] : s.pending()) {
    if (p.kind == Pending::Kind::kWaiter) {
      waiters_.remove(p.handle);
      waiter_info_.erase(p.handle);
    } else {
      hub_.remove(p.handle);
      watch_info_.erase(p.handle);
    }
  }
  s.pending().clear();
  // Keep the session alive until this call returns: it is our caller.
  auto self = sessions_.find(&s);
  std::shared_ptr<Session> keep;
  if (self != sessions_.end()) {
    keep = std::move(self->second);
    sessions_.erase(self);
  }
  if (stopping_ && sessions_.empty() && done_) {
    grace_timer_.cancel();
    std::exchange(done_, nullptr)();
  }
}

void Dispatcher::revoke_closed_leases() {
  revoke_posted_ = false;
  auto closed = std::exchange(closed_leases_, {});
  if (stopping_ || closed.empty()) return;
  auto log = ddp::log::get("store.server");
  std::vector<LeaseId> ids;
  ids.reserve(closed.size());
  for (const auto& [id, peer] : closed) ids.push_back(id);
  try {
    // One mutation for all: a mass disconnect is one event frame per watcher.
    const auto n = core_.revoke_leases(ids);
    if (closed.size() <= kLeaseLogLines) {
      for (const auto& [id, peer] : closed)
        log->info("lease revoked: its connection closed lease={} peer={}", id, peer);
    } else {
      log->info("leases revoked: their connections closed count={} first_peer={} last_peer={}", n,
                closed.front().second, closed.back().second);
    }
  } catch (const std::exception& e) {
    // Not saved, so not done: the leases live on until their TTL runs out.
    log->error(
        "revoking lease of a closed connection failed; it expires by its TTL instead leases={} "
        "first_lease={} "
        "peer={} error=\"{}\"",
        closed.size(), closed.front().first, closed.front().second, e.what());
  }
  after_work();
}

void Dispatcher::shutdown(std::function<void()> done) {
  auto log = ddp::log::get("store.server");
  try {
    drain();
  } catch (const std::exception& e) {
    log->error("shutdown: delivering last changes failed error=\"{}\"", e.what());
  }
  stopping_ = true;
  waiter_timer_.cancel();
  lease_timer_.cancel();
  reclaim_timer_.cancel();
  auth_log_timer_.cancel();
  disk_timer_.cancel();
  // Moved out first: a send can close its session, which edits these maps.
  auto waiting = std::move(waiter_info_);
  waiter_info_.clear();
  for (auto& [id, info] : waiting) {
    waiters_.remove(id);
    info.session->pending().erase(info.req.id);
    info.session->send(reply(info.req.id, Status::kShuttingDown, "server is shutting down"));
  }
  auto watching = std::move(watch_info_);
  watch_info_.clear();
  for (auto& [id, info] : watching) {
    hub_.remove(id);
    info.session->pending().erase(info.request_id);
    auto r = reply(info.request_id, Status::kShuttingDown, "server is shutting down");
    // A live watch has been sent every event up to now (drain() above), so it
    // may resume after this revision: the one the saved snapshot is taken at,
    // which a restarted server can serve watches from without its history.
    // A watch still replaying says nothing (0): it resumes where it was.
    if (info.replay_from == 0) r.revision = core_.revision();
    info.session->send(r);
  }
  if (persistence_) {
    try {
      persistence_->close(core_);
      log->info("state saved data_dir={} keys={} revision={}", persistence_->dir(), core_.kv().size(),
                core_.revision());
    } catch (const std::exception& e) {
      saved_ = false;
      log->error("saving state failed data_dir={} error=\"{}\"", persistence_->dir(), e.what());
    }
  }
  if (sessions_.empty()) return done();
  done_ = std::move(done);
  std::vector<std::shared_ptr<Session>> all;
  for (auto& [ptr, s] : sessions_) all.push_back(s);
  for (auto& s : all) s->close_after_flush();
  if (!done_) return;  // every session closed at once
  grace_timer_.expires_after(kShutdownGrace);
  grace_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    std::vector<std::shared_ptr<Session>> left;
    for (auto& [ptr, s] : sessions_) left.push_back(s);
    for (auto& s : left) s->close("shutdown grace period over");
  });
}

}  // namespace ddp::store::server
