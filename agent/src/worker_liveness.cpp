// The worker group's liveness: deadlines from torch FileTimer requests (and
// heartbeats and sections), and what happens when one passes: the hung
// worker's tree is killed and it becomes the attempt's failure, named with
// the rank and the scope.
#include <signal.h>
#include <sys/types.h>

#include <cmath>
#include <utility>

#include "ddp/common/logging.hpp"
#include "ddp/common/proc_file.hpp"
#include "ddp/common/time_bounds.hpp"
#include "worker_group.hpp"

namespace ddp::agent {

namespace {

// Live FileTimer scopes one worker may have. torch's `timer.expires()`
// releases its scope when the block ends, so a worker has as many as it nests
// (a handful); past this it leaks them, and each costs the agent memory and
// time. Bounds the agent's memory too: a scope name is at most one request
// line (kMaxLine, 4 KiB), so 1024 of them take at most ~5 MiB per worker.
constexpr std::size_t kMaxTimerScopesPerWorker = 1024;
// FileTimer requests held while the workers' pids are not known yet.
constexpr std::size_t kMaxEarlyTimerRequests = 4096;

std::string seconds_text(double s) {
  char buf[32];
  // %.1f of 1e300 fills the buffer before its unit.
  std::snprintf(buf, sizeof(buf), std::fabs(s) < 1e9 ? "%.1f s" : "%.3g s", s);
  return buf;
}

}  // namespace

void WorkerGroup::replay_early_timer_requests() {
  auto early = std::exchange(early_timer_requests_, {});
  for (const auto& r : early) on_timer_request(r);
}

int WorkerGroup::local_rank_of(pid_t pid) const {
  // A worker's tree is a few levels deep (a shell, python, a data loader).
  for (int depth = 0; pid > 1 && depth < 32; ++depth) {
    for (const auto& w : workers_) {
      if (w.spawned && !w.done && w.pid == pid) return w.local_rank;
    }
    pid = proc_parent(pid).value_or(-1);
  }
  return -1;
}

void WorkerGroup::on_timer_request(const TimerRequest& r) {
  if (state_ != State::kRunning) return;
  const int lr = local_rank_of(r.pid);
  if (lr < 0 && pending_spawns_ > 0 && early_timer_requests_.size() < kMaxEarlyTimerRequests) {
    early_timer_requests_.push_back(r);
    return;
  }
  if (lr < 0) {
    log_->warn(
        "FileTimer request from pid={} scope={}, which is not in a local worker's process "
        "tree: ignored",
        r.pid, r.scope);
    return;
  }
  if (r.expiration_time < 0) {
    watch_.disarm(lr, "FileTimer", r.scope);
    return;
  }
  Worker& w = workers_[static_cast<std::size_t>(lr)];
  if (watch_.count(lr, "FileTimer") >= kMaxTimerScopesPerWorker && !watch_.armed(lr, "FileTimer", r.scope)) {
    if (!w.timer_scopes_full) {
      w.timer_scopes_full = true;
      log_->warn(
          "worker rank={} local_rank={} has {} live FileTimer scopes, the most ddprun keeps per worker: "
          "new scope '{}' is not armed, nor any new scope after it until some are released (scopes armed "
          "already still expire; torch's timer.expires() releases its scope when the block ends)",
          w.rank, lr, kMaxTimerScopesPerWorker, r.scope);
    }
    return;
  }
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const double left = r.expiration_time - now;
  Deadline d;
  d.local_rank = lr;
  d.source = "FileTimer";
  d.scope = r.scope;
  d.signal = r.signal;
  // Anything from a worker: a scope "1e12 s" ahead (past int64 nanoseconds)
  // is kMaxDuration ahead, which no job outlives, not a time in the past.
  d.at = saturating_add(std::chrono::steady_clock::now(), clamp_duration(left, TimeUnit::kSeconds));
  d.detail = "set to expire " + seconds_text(std::max(0.0, left)) + " later";
  log_->debug("FileTimer armed rank={} scope={} in={}", w.rank, r.scope, seconds_text(left));
  watch_.arm(d);
}

void WorkerGroup::on_deadline(const Deadline& d) {
  if (state_ != State::kRunning) return;
  if (d.source == "peer") {
    // The other nodes had their time to name the rank every local one waits for.
    if (peer_wait_ != d.local_rank) return;
    peer_wait_ = -1;
    const Worker& w = workers_[static_cast<std::size_t>(d.local_rank)];
    if (w.spawned && !w.done && !w.hung)
      collect_then_kill(d.local_rank, std::move(peer_info_), peer_deadline_);
    return;
  }
  if (d.source == "heartbeat" || d.source == "section") {
    heartbeats_->on_deadline(d);  // re-reads the worker's liveness file
    return;
  }
  Worker& w = workers_[static_cast<std::size_t>(d.local_rank)];
  if (!w.spawned || w.done || w.hung) return;
  if (d.source == "FileTimer" && d.signal <= 0) {
    // torch's server does the same: a timer without a signal only expires.
    log_->info("FileTimer expired rank={} scope={} with no signal: not killing it", w.rank, d.scope);
    return;
  }
  HangInfo info;
  info.source = d.source;
  info.scope = d.scope;
  info.detail = d.detail;
  collect_then_kill(w.local_rank, std::move(info), d.at);
}

void WorkerGroup::kill_named(int local_rank, HangInfo info) {
  if (state_ != State::kRunning || local_rank < 0 || static_cast<std::size_t>(local_rank) >= workers_.size())
    return;
  const Worker& w = workers_[static_cast<std::size_t>(local_rank)];
  if (!w.spawned || w.done || w.hung || hang_collection_ == local_rank) return;
  collect_then_kill(local_rank, std::move(info), std::chrono::steady_clock::now());
}

void WorkerGroup::kill_hung(Worker& w, HangInfo info, std::chrono::milliseconds late) {
  const auto failure = record_hang(w, std::move(info), late);
  after_recorded(failure, [this, local_rank = w.local_rank, failure, late] {
    Worker& hung = workers_[static_cast<std::size_t>(local_rank)];
    kill_tree(hung);
    report_hang(hung, *failures_[failure].hang, late);
  });
}

void WorkerGroup::kill_tree(Worker& w) {
  runner_.signal_group(w.pid, SIGKILL);  // the guard kills the whole tree; a no-op once reaped
}

void WorkerGroup::after_recorded(std::size_t failure, std::function<void()> then) {
  if (!events_.hang_recorded) return then();
  // Meanwhile other ranks' deadlines are most likely theirs waiting for this
  // one: they are left alone (collect_then_kill), as during a collection.
  hang_collection_ = failures_[failure].local_rank;
  // Whichever comes first, the store's answer or the timer, runs `then`.
  auto once = std::make_shared<std::function<void()>>([this, att = attempt_, then = std::move(then)] {
    if (att != attempt_) return;
    hang_collection_ = -1;
    then();
  });
  auto timer = std::make_shared<boost::asio::steady_timer>(io_, kHangRecordWait);
  auto fire = [once, timer] {
    timer->cancel();
    if (!*once) return;
    const auto run = std::exchange(*once, nullptr);
    run();
  };
  timer->async_wait([fire](boost::system::error_code ec) {
    if (!ec) fire();
  });
  events_.hang_recorded(failures_[failure], fire);
}

std::size_t WorkerGroup::record_hang(Worker& w, HangInfo info, std::chrono::milliseconds late) {
  if (info.source == "straggler") {
    log_->error("worker killed as a straggler rank={} local_rank={} pid={}: {}; killed its process tree",
                w.rank, w.local_rank, w.pid, info.what());
  } else {
    log_->error(
        "worker hung rank={} local_rank={} pid={}: {}; killed its process tree ({} ms after "
        "the deadline)",
        w.rank, w.local_rank, w.pid, info.what(), late.count());
  }
  WorkerFailure f = make_failure(w);
  f.signal = SIGKILL;
  f.exit_code = 0;
  f.error.reset();  // an error file from before the hang is not why it ended
  f.error_file_problem.clear();
  f.hang = std::move(info);
  failures_.push_back(f);
  w.hung = true;  // from now on: its kill follows once the record is in
  watch_.clear(w.local_rank);
  return failures_.size() - 1;
}

void WorkerGroup::report_hang(const Worker& w, const HangInfo& hang, std::chrono::milliseconds late) {
  if (events_.hung) events_.hung(w, hang, late);
  if (state_ == State::kRunning) events_.failed();
}

}  // namespace ddp::agent
