#include "dispatcher.hpp"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <optional>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "server_log.hpp"

namespace ddp::store::server {
namespace asio = boost::asio;

namespace {

// How long a graceful stop waits for sessions to take their last replies.
constexpr std::chrono::seconds kShutdownGrace{2};
// Past this many leases revoked at once, one summary log line instead of one
// per lease: a whole cluster disconnecting must not flood the journal.
constexpr std::size_t kLeaseLogLines = 16;
// Leases due within this window of the first are reaped together, in one
// mutation: after a power loss or a partition the agents' last keepalives are
// spread over their keepalive interval, and reaping each lease on its own
// would send every watcher one frame per lease. A lease goes at most this
// late; against a TTL of seconds (15 s for agents) that is noise.
constexpr Millis kLeaseExpiryBatch{100};

double wall_clock_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
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
      reply_budget_(options.max_queued_reply_bytes),
      reclaimer_(ReclaimOptions{options.keep_rounds, options.reclaim_idle_jobs}),
      reclaim_timer_(io),
      waiter_timer_(io),
      lease_timer_(io),
      grace_timer_(io),
      auth_log_timer_(io),
      auth_(AuthBackoff{options.auth_free_failures, options.auth_backoff_base, options.auth_backoff_max}),
      disk_timer_(io),
      job_log_(options.log_jobs) {
  core_.set_expiry_batch(kLeaseExpiryBatch);
  core_.set_sink([this](const Mutation& m) {
    // Before the response exists: an acknowledged write is in the log (and,
    // with --fsync=always, fsynced before any reply leaves: after_append()).
    if (persistence_) {
      persistence_->append(m);
      after_append();
    }
    committed_.push_back(m);
  });
}

Dispatcher::~Dispatcher() = default;

void Dispatcher::open_persistence() {
  if (!options_.data_dir.empty()) {
    persistence_ = std::make_unique<Persistence>(
        options_.data_dir,
        options_.snapshot_log_bytes != 0 ? options_.snapshot_log_bytes : Persistence::kDefaultCompactBytes,
        options_.recover_corrupt_log, options_.fsync == FsyncMode::kAlways);
    persistence_->open(core_, Clock::now());
    if (options_.fsync == FsyncMode::kAlways) {
      syncer_ = std::make_unique<LogSyncer>(io_, [this](std::uint64_t seq, int err) { on_synced(seq, err); });
      // open() made what it loaded durable.
      gate_.appended(persistence_->last_seq());
      gate_.durable(persistence_->last_seq());
    }
  }
  job_log_.adopt(core_.kv(), wall_clock_now());
  arm_reclaim_sweep();
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
          {"compaction_failures", compaction_failures_},
          {"log_fsyncs", persistence_ ? static_cast<std::int64_t>(persistence_->syncs()) : 0}};
}

std::map<std::string, std::int64_t> Dispatcher::metrics() const {
  auto out = stats();
  out["history_bytes"] = static_cast<std::int64_t>(core_.history().bytes());
  out["auth_failures"] = auth_failures_;
  out["unauthenticated_connections"] = static_cast<std::int64_t>(preauth_.size());
  out["unauthenticated_bytes"] = static_cast<std::int64_t>(preauth_.bytes());
  out["unauthenticated_closed"] = static_cast<std::int64_t>(preauth_.closed());
  request_metrics_.append_to(out);
  out["jobs_tracked"] = static_cast<std::int64_t>(job_log_.size());
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
    server_log().warn("write refused: data dir degraded op={} peer={} error=\"{}\"", op_name(req.op),
                      s->peer(), e.what());
    s->send(reply(req.id, Status::kInternal,
                  std::string("not saved, nothing changed: ") + e.what() +
                      "; the server refuses writes until its "
                      "data dir takes them again"));
    after_work();
  } catch (const std::exception& e) {
    // A bug: this request fails, the server goes on.
    server_log().error("request failed op={} peer={} error=\"{}\"", server_op_name(req.op), s->peer(),
                       e.what());
    s->send(reply(req.id, Status::kInternal, e.what()));
    after_work();
  }
}

void Dispatcher::dispatch(const std::shared_ptr<Session>& s, Request& req) {
  if (!s->hello_done()) {
    if (req.op == Op::kHello) return handle_hello(s, req);
    server_log().warn("closing connection: {} before hello peer={}", op_name(req.op), s->peer());
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
    case Op::kJobs:
      return handle_jobs(s, req);
    default:
      if (is_queue_op(req.op)) return handle_queue(s, req);
      break;
  }
  auto resp = core_.execute(req, Clock::now());
  // The answer to a later request of the connection says it succeeded. Under
  // --fsync=always that answer waits for this set's record too (AckGate).
  if (req.op == Op::kSet && (req.b & kSetQuiet) != 0 && resp.status == Status::kOk) return;
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

void Dispatcher::drain() {
  // Sends can close sessions (write queue full), which edits the maps: look ids
  // up afresh every time instead of holding iterators.
  const auto now = Clock::now();
  const auto wall_now = wall_clock_now();
  for (std::size_t m = 0; m < committed_.size(); ++m) {
    const auto mutation = std::move(committed_[m]);
    auto old = reclaimer_.on_commit(mutation, core_.kv(), now);
    job_log_.on_commit(mutation, core_.kv(), wall_now);
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
  auto& log = server_log();
  try {
    drain();
    if (!reclaim_keys_.empty()) {
      reclaim();
      drain();
    }
  } catch (const std::exception& e) {
    log.error("delivering changes to waiters and watchers failed error=\"{}\"", e.what());
    committed_.clear();
  }
  maybe_compact();
  if (persistence_ && persistence_->degraded()) arm_disk_probe();
  try {
    rearm_timers();
  } catch (const std::exception& e) {
    log.error("rearming timers failed error=\"{}\"", e.what());
  }
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

void Dispatcher::on_lease_timer() {
  lease_armed_.reset();
  try {
    const auto n = core_.expire_leases(Clock::now());
    lease_retry_at_.reset();
    if (n > 0) server_log().debug("leases expired count={}", n);
  } catch (const std::exception& e) {
    // The lease stays (its keys too) until its deletion is in the log.
    lease_retry_at_ = Clock::now() + kDiskProbeInterval;
    server_log().error("lease expiry not saved; retrying in {} ms error=\"{}\"", kDiskProbeInterval.count(),
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
  auto& log = server_log();
  std::vector<LeaseId> ids;
  ids.reserve(closed.size());
  for (const auto& [id, peer] : closed) ids.push_back(id);
  try {
    // One mutation for all: a mass disconnect is one event frame per watcher.
    const auto n = core_.revoke_leases(ids);
    if (closed.size() <= kLeaseLogLines) {
      for (const auto& [id, peer] : closed)
        log.info("lease revoked: its connection closed lease={} peer={}", id, peer);
    } else {
      log.info("leases revoked: their connections closed count={} first_peer={} last_peer={}", n,
               closed.front().second, closed.back().second);
    }
  } catch (const std::exception& e) {
    // Not saved, so not done: the leases live on until their TTL runs out.
    log.error(
        "revoking lease of a closed connection failed; it expires by its TTL instead leases={} "
        "first_lease={} "
        "peer={} error=\"{}\"",
        closed.size(), closed.front().first, closed.front().second, e.what());
  }
  after_work();
}

void Dispatcher::shutdown(std::function<void()> done) {
  auto& log = server_log();
  try {
    drain();
  } catch (const std::exception& e) {
    log.error("shutdown: delivering last changes failed error=\"{}\"", e.what());
  }
  stopping_ = true;
  // Job listings in progress end at their next slice, answered "shutting down".
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
  // One fdatasync at a time, and no answer from the syncer after this.
  if (syncer_) syncer_->stop();
  if (persistence_) {
    try {
      persistence_->close(core_);
      log.info("state saved data_dir={} keys={} revision={}", persistence_->dir(), core_.kv().size(),
               core_.revision());
    } catch (const std::exception& e) {
      saved_ = false;
      log.error("saving state failed data_dir={} error=\"{}\"", persistence_->dir(), e.what());
    }
  }
  // close() fsynced everything (or failed): the held replies go out now, or never.
  if (syncer_) {
    if (saved_) {
      gate_.durable(persistence_->last_seq());
      release_held();
    } else {
      for (auto& s : gate_.release()) s->close("data dir not saved");
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
