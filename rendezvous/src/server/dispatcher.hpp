// The server's brain on its loop thread: answers requests from every session
// through one StoreCore, parks blocked gets/waits in a WaiterTable and watches
// in a WatchHub, runs the two timers (waiter deadlines, lease expiry), and
// appends every mutation to the persistence log before its response is queued.
// With --fsync=always no reply leaves before the log records appended
// before it are fdatasync'ed, by a LogSyncer off the loop, one sync covering
// every record appended since the last (group commit, ack_gate.hpp).
//
// Thread-safety: loop thread only; StoreServer posts to it.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "auth_limiter.hpp"
#include "ddp/store/job_report.hpp"
#include "ddp/store/store_server.hpp"
#include "job_log.hpp"
#include "job_scan.hpp"
#include "log_syncer.hpp"
#include "persistence.hpp"
#include "preauth_pool.hpp"
#include "reclaimer.hpp"
#include "reply_budget.hpp"
#include "request_metrics.hpp"
#include "session.hpp"
#include "store_core.hpp"
#include "torch_queues.hpp"
#include "waiter_table.hpp"
#include "watch_hub.hpp"

namespace ddp::store::server {

// While degraded: how often the data dir is probed, and how long lease expiry
// waits before writing its deletion again.
inline constexpr std::chrono::milliseconds kDiskProbeInterval{1000};

// A response with just an id, a status and a message: the start of every reply
// the dispatcher sends (dispatcher.cpp and its continuations).
inline Response reply(std::uint32_t id, Status status, std::string message = {}) {
  Response r;
  r.id = id;
  r.status = status;
  r.message = std::move(message);
  return r;
}

class Dispatcher final : public SessionHost {
 public:
  Dispatcher(boost::asio::io_context& io, const StoreServerOptions& options);
  ~Dispatcher() override;

  // Loads --data-dir state (ConfigError naming the path); before the loop runs.
  void open_persistence();
  void add_session(const std::shared_ptr<Session>& session);
  std::size_t connections() const { return sessions_.size(); }
  // Connections still in their handshake (SessionOptions::preauth).
  PreauthPool& preauth() { return preauth_; }
  // The sessions' output waits while it is closed (--fsync=always).
  AckGate& ack_gate() { return gate_; }
  // Unread replies of all connections together (SessionOptions::reply_budget).
  ReplyBudget& reply_budget() { return reply_budget_; }
  std::map<std::string, std::int64_t> stats() const;
  // stats() plus per-op request counts and the latency histogram (see
  // RequestMetrics); for the daemon's /metrics (its per-job series come from jobs()).
  std::map<std::string, std::int64_t> metrics() const;
  // The jobs in the store (dispatcher_jobs.cpp): `done` runs on the loop
  // thread once a JobScan for `query` has walked the key space in slices, or
  // at once with a recent enough answer; with nullptr when the server stops
  // first. False, without calling `done`, when too many listings run already.
  using JobsCallback = std::function<void(const JobsReport*)>;
  bool jobs(const JobQuery& query, JobsCallback done);
  // Graceful stop: pending gets/waits/watches get kShuttingDown, state is
  // flushed, sessions close after writing; `done` runs once all have closed (or
  // after a grace period).
  void shutdown(std::function<void()> done);
  // False when shutdown() could not save the data dir.
  bool saved() const { return saved_; }

  void on_request(const std::shared_ptr<Session>& s, Request&& req) override;
  void on_closed(Session& s) override;
  void on_drained(const std::shared_ptr<Session>& s) override;

 private:
  struct WaiterInfo {
    std::shared_ptr<Session> session;
    Request req;
    Clock::time_point deadline;
  };
  struct WatchInfo {
    std::shared_ptr<Session> session;
    std::uint32_t request_id = 0;
    std::string prefix;
    // While past events are still being sent: the next revision to replay from
    // the history (live events wait there meanwhile); 0 once the watch is live.
    Revision replay_from = 0;
    // The client reads kDeleteRuns items (kWatchDeleteRuns).
    bool delete_runs = false;
  };

  void dispatch(const std::shared_ptr<Session>& s, Request& req);
  void handle_hello(const std::shared_ptr<Session>& s, const Request& req);
  void handle_blocking(const std::shared_ptr<Session>& s, Request& req);
  void handle_watch(const std::shared_ptr<Session>& s, const Request& req);
  void handle_cancel(const std::shared_ptr<Session>& s, const Request& req);
  // kBarrier: counts the arrival; parks it until the count reaches the world size.
  void handle_barrier(const std::shared_ptr<Session>& s, Request& req);
  // A parked barrier's answer now: OK with the count once it is reached,
  // nullopt while it is not (or the counter was deleted).
  std::optional<Response> barrier_reached(const Request& req);
  // Parks `req` until a put of one of `keys`, or its deadline (b ms; <0: never).
  void park(const std::shared_ptr<Session>& s, Request& req, const std::vector<std::string>& keys,
            Clock::time_point now);
  // kJobs: keys[0] = a run id, or none for every job (dispatcher_jobs.cpp).
  void handle_jobs(const std::shared_ptr<Session>& s, const Request& req);
  // Runs the next slice of the listing `key`, and answers its requests once done.
  void step_scan(const std::string& key);
  // TCPStore queue ops (dispatcher_queues.cpp).
  void handle_queue(const std::shared_ptr<Session>& s, Request& req);
  // Keys a get/wait/check still lacks; a non-empty queue counts as present for wait/check.
  std::vector<std::string> still_missing(const Request& req) const;
  // Refuses a new pending request (duplicate id, per-connection limit).
  bool refuse_pending(const std::shared_ptr<Session>& s, const Request& req);
  // One kEvent frame per revision of `events` (a multi-key mutation arrives as
  // one unit), compacted for a watch that reads kDeleteRuns; ids left 0.
  static std::vector<Response> event_frames(const std::vector<const WatchEvent*>& events, bool delete_runs);
  // Sends the frames to watch `id` of `s` under its request id.
  void send_frames(Session& s, std::uint32_t id, std::vector<Response>& frames);
  // Sends a replaying watch's next past events, about kReplayChunkBytes at a
  // time, so a watch from far back never queues the whole history at once.
  void pump_replay(WatchId id);
  // Hands committed mutations to waiters and watchers, in commit order.
  void drain();
  void release_waiter(WaiterId id);
  // Delivers, compacts (with back-off after a failure) and rearms the timers;
  // never throws: a failure here belongs to no request.
  void after_work();
  // Deletes what the reclaimer named (reclaim_keys_) in one mutation.
  void reclaim();
  void arm_reclaim_sweep();
  void maybe_compact();
  // Group commit: a record was appended; starts a sync unless one runs.
  void after_append();
  void start_sync();
  // A sync covered the records up to `seq` (err 0), or failed (fatal).
  void on_synced(std::uint64_t seq, int err);
  // The sessions whose output waited for the disk write what may go now.
  void release_held();
  // No reply that may wait for an unsynced record is ever sent: every
  // session is closed, writes are refused from now on, options_.on_fatal is told.
  void on_sync_failed(const std::string& why);
  // While the data dir is degraded: probes it every second until it takes writes.
  void arm_disk_probe();
  void rearm_timers();
  // Points `timer` at `next` unless it is already `armed` for it (none: cancels
  // it); `fire` runs when it expires.
  void rearm(boost::asio::steady_timer& timer, std::optional<Clock::time_point>& armed,
             std::optional<Clock::time_point> next, void (Dispatcher::*fire)());
  void on_waiter_timer();
  void on_lease_timer();
  void revoke_closed_leases();
  // Logs a failed or refused hello: the first of a quiet period at once, the
  // rest summarised once per auth_log_period.
  void log_auth_failure(const Session& s, const char* what);
  void on_auth_log_timer();

  boost::asio::io_context& io_;
  StoreServerOptions options_;
  StoreCore core_;
  WaiterTable waiters_;
  WatchHub hub_;
  TorchQueues queues_;
  std::unique_ptr<Persistence> persistence_;
  std::unordered_map<WaiterId, WaiterInfo> waiter_info_;
  std::unordered_map<WatchId, WatchInfo> watch_info_;
  // Before sessions_: a session leaves them when it is destroyed.
  PreauthPool preauth_;
  ReplyBudget reply_budget_;
  std::unordered_map<Session*, std::shared_ptr<Session>> sessions_;
  // Leases granted with kLeaseBindToConnection, by the session that granted them.
  std::unordered_map<Session*, std::vector<LeaseId>> bound_leases_;
  // Bound leases of connections closed since the last revoke_closed_leases()
  // (with the peer, for the log), revoked together by one posted call.
  std::vector<std::pair<LeaseId, std::string>> closed_leases_;
  bool revoke_posted_ = false;
  // Watch event frames sent (stat `event_frames`): what a mass expiry costs.
  std::int64_t event_frames_ = 0;
  std::vector<Mutation> committed_;
  AckGate gate_;
  std::unique_ptr<LogSyncer> syncer_;  // --fsync=always with a data dir
  Reclaimer reclaimer_;
  std::vector<std::string> reclaim_keys_;  // named by the reclaimer, deleted by reclaim()
  // Prefixes of finished jobs whose history goes once reclaim() deleted their keys.
  std::vector<std::string> forget_prefixes_;
  boost::asio::steady_timer reclaim_timer_;
  boost::asio::steady_timer waiter_timer_;
  boost::asio::steady_timer lease_timer_;
  boost::asio::steady_timer grace_timer_;
  boost::asio::steady_timer auth_log_timer_;
  AuthLimiter auth_;
  bool auth_period_open_ = false;
  std::int64_t auth_failures_ = 0;  // for /metrics
  boost::asio::steady_timer disk_timer_;
  bool disk_probe_armed_ = false;
  // Compaction back-off after a failure: no retry before this time.
  std::chrono::steady_clock::time_point compact_retry_at_{};
  std::chrono::milliseconds compact_backoff_{0};
  bool disk_short_seen_ = false;  // a probe found too little space since the last one that found enough
  std::int64_t compaction_failures_ = 0;
  // Lease expiry is not retried before this time after its log write failed.
  std::optional<Clock::time_point> lease_retry_at_;
  bool saved_ = true;
  std::optional<Clock::time_point> waiter_armed_;
  std::optional<Clock::time_point> lease_armed_;
  std::uint64_t next_handle_ = 1;
  std::int64_t requests_ = 0;
  RequestMetrics request_metrics_;
  JobLog job_log_;
  struct JobScanRun {
    std::unique_ptr<JobScan> scan;
    std::vector<JobsCallback> waiting;
  };
  struct JobsCache {
    Revision revision = 0;
    Clock::time_point at;
    std::shared_ptr<const JobsReport> report;
  };
  std::map<std::string, JobScanRun> job_scans_;  // running listings, by query
  std::map<std::string, JobsCache> jobs_cache_;  // finished ones, by query
  std::size_t job_waiters_ = 0;
  bool stopping_ = false;
  std::function<void()> done_;
};

}  // namespace ddp::store::server
