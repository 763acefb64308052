// Dispatcher, continued: what the log on disk needs (docs/reliability.md):
// group commit under --fsync=always, a failed fsync, compaction with its
// back-off, the probe of a degraded data dir, and the reclaim of finished
// jobs' and old rounds' keys.
#include <algorithm>
#include <utility>

#include "ddp/common/logging.hpp"
#include "ddp/store/job_keys.hpp"
#include "dispatcher.hpp"

namespace ddp::store::server {
namespace {

// Compaction retries after a failure: 1 s, doubling up to 60 s.
constexpr std::chrono::milliseconds kCompactBackoffFirst{1000};
constexpr std::chrono::milliseconds kCompactBackoffMax{60000};

}  // namespace

void Dispatcher::after_append() {
  if (!syncer_) return;
  gate_.appended(persistence_->last_seq());
  start_sync();
}

void Dispatcher::start_sync() {
  if (!syncer_ || syncer_->busy() || stopping_ || gate_.durable() >= gate_.appended() ||
      persistence_->failed())
    return;
  syncer_->start(persistence_->log_fd(), gate_.appended());
}

void Dispatcher::on_synced(std::uint64_t seq, int err) {
  if (err != 0) return on_sync_failed(persistence_->sync_failed(err));
  persistence_->synced(seq);
  gate_.durable(seq);
  release_held();
  start_sync();  // the records appended while it ran
}

void Dispatcher::release_held() {
  for (auto& s : gate_.release()) s->on_durable();
}

void Dispatcher::on_sync_failed(const std::string& why) {
  // Whatever is queued may wait for a record the disk may not have: every
  // connection goes, its replies unsent.
  std::vector<std::shared_ptr<Session>> all;
  for (auto& [ptr, s] : sessions_) all.push_back(s);
  gate_.release();
  ddp::log::get("store.server")
      ->error(
          "data dir failed: the log could not be fsynced, so the writes since the last fsync are not "
          "acknowledged: closing every connection ({}) without their replies; writes are refused from now "
          "on, restart the daemon error=\"{}\"",
          all.size(), why);
  for (auto& s : all) s->close("log fsync failed");
  if (options_.on_fatal) options_.on_fatal(why);
}

void Dispatcher::arm_reclaim_sweep() {
  const auto period = reclaimer_.sweep_period();
  if (period.count() == 0 || stopping_) return;
  reclaim_timer_.expires_after(period);
  reclaim_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || stopping_) return;
    auto keys = reclaimer_.idle_jobs(core_.kv(), Clock::now());
    reclaim_keys_.insert(reclaim_keys_.end(), keys.begin(), keys.end());
    for (const auto& [run, count] : reclaimer_.take_reclaimed_runs()) {
      job_log_.reclaimed(run, count);
      // Its past events leave the watch history once reclaim() deleted its keys.
      for (auto& prefix : keys::job_prefixes(run)) forget_prefixes_.push_back(std::move(prefix));
    }
    job_log_.prune(core_.kv());
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
    // The finished jobs' past events go with their keys (the watch history
    // held ~4 KB per finished job, docs/reliability.md).
    for (const auto& prefix : std::exchange(forget_prefixes_, {}))
      core_.history().forget(prefix, core_.revision());
    ddp::log::get("store.server")->debug("reclaimed keys of old rounds and finished jobs count={}", n);
  } catch (const std::exception& e) {
    // Not in the log, so not deleted; the next round close or sweep names them again.
    forget_prefixes_.clear();
    ddp::log::get("store.server")
        ->warn("reclaiming keys failed count={} error=\"{}\"", keys.size(), e.what());
  }
}

void Dispatcher::maybe_compact() {
  if (!persistence_ || stopping_ || !persistence_->wants_compaction()) return;
  const auto now = std::chrono::steady_clock::now();
  if (now < compact_retry_at_) return;
  try {
    persistence_->compact(core_);
    compact_backoff_ = std::chrono::milliseconds(0);
    if (syncer_) {
      gate_.durable(persistence_->last_seq());  // all in the fsynced snapshot
      release_held();
    }
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
      // Space that a probe found missing is back: compact now. A failure
      // with room on the disk (a rename that fails) keeps its backoff.
      if (std::exchange(disk_short_seen_, false)) compact_retry_at_ = {};
    } else {
      disk_short_seen_ = true;
    }
    after_work();
  });
}

}  // namespace ddp::store::server
