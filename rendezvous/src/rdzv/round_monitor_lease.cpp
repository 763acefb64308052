// RoundMonitor's lease: the grant, the keep-alive thread, the revoke, and the
// fence deadline that follows from the keep-alives the store answered
// (docs/rendezvous.md, "Fencing"). round_monitor.cpp has the round's watches
// and events.
#include <algorithm>
#include <thread>
#include <utility>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "keys.hpp"
#include "round_monitor.hpp"

namespace ddp::rdzv::detail {

std::chrono::milliseconds fence_margin(std::chrono::milliseconds keep_alive_interval) {
  return keep_alive_interval / 2;
}

store::LeaseId RoundMonitor::lease() {
  store::LeaseId held = 0;
  {
    std::lock_guard<std::mutex> lock(keepalive_->mu);
    held = keepalive_->lease;
    // Kept alive within the last interval: it cannot have expired.
    if (held != 0 && Clock::now() - keepalive_->last_ok < interval_) return held;
  }
  if (held != 0) {
    // Not heard of for a while (this process was stopped past the lease's
    // TTL, say): the keep-alive thread may not have found it gone yet, and a
    // key put under a lease the store dropped is refused. Ask once.
    const auto sent = Clock::now();
    try {
      store_->lease_keepalive(held);
      std::lock_guard<std::mutex> lock(keepalive_->mu);
      if (keepalive_->lease == held) {
        keepalive_->last_ok = Clock::now();
        keepalive_->acked_send = std::max(keepalive_->acked_send, sent);
        if (keepalive_->fence_sink) keepalive_->fence_sink(keepalive_->acked_send + keepalive_->backstop);
        return held;
      }
    } catch (const StoreError& e) {
      // The store answered: the lease is gone. A new one follows.
      log::get("rdzv")->info("lease {} of this node is gone ({}): granting a new one", held, e.what());
    }
    std::lock_guard<std::mutex> lock(keepalive_->mu);
    if (keepalive_->lease == held) keepalive_->lease = 0;
  }
  const auto sent = Clock::now();
  return adopt_lease(store_->lease_grant(ttl_), sent);
}

std::optional<store::BatchOp> RoundMonitor::lease_grant_op() const {
  std::lock_guard<std::mutex> lock(keepalive_->mu);
  if (keepalive_->lease != 0) return std::nullopt;
  return store::BatchOp::lease_grant(ttl_);
}

store::LeaseId RoundMonitor::adopt_lease(store::LeaseId id, Clock::time_point sent) {
  std::lock_guard<std::mutex> lock(keepalive_->mu);
  keepalive_->lease = id;
  keepalive_->last_ok = Clock::now();
  keepalive_->acked_send = sent;
  if (keepalive_->fence_sink) keepalive_->fence_sink(sent + keepalive_->backstop);
  return id;
}

void RoundMonitor::revoke(std::chrono::milliseconds deadline, const std::string& stopped_key) {
  store::LeaseId id = 0;
  bool reachable = false;
  {
    std::lock_guard<std::mutex> lock(keepalive_->mu);
    std::swap(id, keepalive_->lease);
    reachable = Clock::now() - keepalive_->last_ok < interval_ * 2;
  }
  // An unreachable store would hold the exit up for a reconnect cycle; the
  // lease then simply expires.
  if (id == 0 || !reachable) return;
  // A store that went away a moment ago (the node hosting it finished first)
  // still looks reachable, and the client would retry it for its whole connect
  // timeout. The request runs on its own thread, which owns what it uses, and
  // is abandoned past `deadline`: the lease then expires within its TTL.
  struct Outcome {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::string error;
  };
  auto out = std::make_shared<Outcome>();
  std::thread([out, store = store_, id, stopped_key] {
    std::string error;
    try {
      if (!stopped_key.empty()) store->set(stopped_key, "1");
      store->lease_revoke(id);
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::lock_guard<std::mutex> lock(out->mu);
    out->done = true;
    out->error = std::move(error);
    out->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(out->mu);
  if (!out->cv.wait_for(lock, deadline, [&] { return out->done; })) {
    log::get("rdzv")->debug("lease revoke gave up after {} lease={}", seconds_text(deadline), id);
  } else if (!out->error.empty()) {
    log::get("rdzv")->debug("lease revoke failed lease={} error={}", id, out->error);
  }
}

void RoundMonitor::set_fence_sink(std::function<void(Clock::time_point)> sink) {
  std::lock_guard<std::mutex> lock(keepalive_->mu);
  keepalive_->fence_sink = std::move(sink);
}

void RoundMonitor::keepalive_now() {
  {
    std::lock_guard<std::mutex> lock(keepalive_->mu);
    keepalive_->send_now = true;
  }
  keepalive_->cv.notify_all();
}

Clock::time_point RoundMonitor::fence_deadline() const {
  std::lock_guard<std::mutex> lock(keepalive_->mu);
  return keepalive_->acked_send + ttl_ - fence_margin_;
}

void RoundMonitor::keepalive_loop(std::shared_ptr<Keepalive> k, std::chrono::milliseconds interval) {
  std::unique_lock<std::mutex> lock(k->mu);
  while (true) {
    k->cv.wait_for(lock, interval, [&] { return k->stop || k->send_now; });
    if (k->stop) return;
    k->send_now = false;
    const store::LeaseId id = k->lease;
    if (id == 0) continue;
    lock.unlock();
    const auto sent = Clock::now();
    std::string lost;
    bool answered = false;
    try {
      // Bounded: the TcpStore client gives up after its request timeout (one
      // keep-alive interval, at least 1 s: store_access.cpp), the etcd client
      // within the keep-alive window (etcd_handler.cpp). A frozen server that
      // keeps the connection open costs misses, never a hung thread, and
      // check_store_silence() judges by the clock even while this call waits.
      k->store->lease_keepalive(id);
      answered = true;
    } catch (const StoreError& e) {
      // The store answered and the lease is gone: this node stalled past its TTL
      // or the store lost its state. Everyone else already saw this node leave.
      lost = e.what();
    } catch (const Error& e) {
      // A miss: last_ok stays where it was, and check_store_silence() declares
      // the store lost once the misses fill the keep-alive window. The client
      // keeps reconnecting meanwhile. Once stopped (detached, maybe at process
      // exit) it stays silent.
      std::lock_guard<std::mutex> relock(k->mu);
      if (k->stop) return;
      log::get("rdzv")->warn("lease keepalive failed lease={} error={}", id, e.what());
    }
    lock.lock();
    if (k->stop) return;
    if (answered) {
      k->last_ok = Clock::now();
      k->acked_send = std::max(k->acked_send, sent);
      if (k->fence_sink) k->fence_sink(k->acked_send + k->backstop);
    } else if (!lost.empty() && k->lease == id) {
      k->lease = 0;
      // Called under k->mu: the destructor clears it under the same lock, so it
      // never runs on a destroyed monitor.
      if (k->on_lease_lost) k->on_lease_lost(id, lost);
    }
  }
}

void RoundMonitor::on_lease_lost(store::LeaseId, const std::string& why) {
  std::uint64_t epoch = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    epoch = epoch_;
  }
  fire(epoch, RoundEvent::kLeaseLost, "the lease of this node expired: " + why);
}

void RoundMonitor::check_store_silence() {
  std::uint64_t epoch = 0;
  std::chrono::milliseconds silent{0};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active_) return;
    epoch = epoch_;
  }
  {
    std::lock_guard<std::mutex> lock(keepalive_->mu);
    if (keepalive_->lease == 0) return;
    silent = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - keepalive_->acked_send);
  }
  // The store renewed the lease after acked_send, so it keeps this node until
  // acked_send + TTL at the earliest; the workers die a fence margin before.
  if (silent >= ttl_ - fence_margin_) {
    fire(epoch, RoundEvent::kStoreLost,
         "no answer from " + store_name_ + " for " + seconds_text(silent) + " (keep-alive window " +
             seconds_text(ttl_) + "; this node's workers are killed " + seconds_text(fence_margin_) +
             " before the store can count it gone)");
  }
}

}  // namespace ddp::rdzv::detail
