// TcpStore watches: start, events, cancel, and resumption after a reconnect from
// the last revision delivered + 1, so a broken connection loses no event.
#include <algorithm>
#include <utility>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "tcp_store_impl.hpp"

namespace ddp::store {

namespace {
std::string describe(const WatchState& w) { return "watch of prefix '" + w.prefix + "'"; }
}  // namespace

std::shared_ptr<WatchState> TcpStore::Impl::start_watch(const std::string& prefix, Revision from,
                                                        WatchCallback on_event, WatchErrorCallback on_error) {
  std::vector<WatchSpec> one;
  one.push_back(WatchSpec{prefix, from, std::move(on_event), std::move(on_error)});
  return start_watches(one).front();
}

std::vector<std::shared_ptr<WatchState>> TcpStore::Impl::start_watches(std::vector<WatchSpec>& specs) {
  refuse_on_io_thread("watch");
  std::vector<std::shared_ptr<WatchState>> ws;
  // Kept here: the I/O thread takes w->ack (nulls it) when the ack arrives.
  std::vector<std::shared_ptr<PendingCall>> acks;
  for (auto& spec : specs) {
    auto w = std::make_shared<WatchState>();
    w->prefix = spec.prefix;
    w->from_revision = spec.from_revision;
    w->on_event = std::move(spec.on_event);
    w->on_error = std::move(spec.on_error);
    // Unconfirmed: a refusal goes to on_error; an ack (a server before
    // kWatchQuiet) finds no call waiting and is dropped.
    if (spec.confirmed || spec.from_revision <= 0) w->ack = std::make_shared<PendingCall>();
    acks.push_back(w->ack);
    ws.push_back(std::move(w));
  }
  std::string frames;
  for (int attempt = 0;; ++attempt) {
    ensure_connected();
    frames.clear();
    for (auto& w : ws) {
      Request req;
      req.op = Op::kWatch;
      req.a = kWatchDeleteRuns;  // expanded in on_watch_reply
      if (!w->ack) req.a |= kWatchQuiet;
      req.keys.push_back(w->prefix);
      req.b = w->from_revision;
      {
        std::lock_guard<std::mutex> lk(mu_);
        req.id = w->id = next_id_++;
        if (next_id_ == 0) next_id_ = 1;
        w->sent_on = connect_epoch_;
        watches_[w->id] = w;
      }
      encode_request(req, frames);
    }
    std::size_t sent = 0;
    try {
      write_frame(frames, &sent);  // one write for all: one round trip
      break;
    } catch (const NetworkError&) {
      std::lock_guard<std::mutex> lk(mu_);
      for (auto& w : ws) watches_.erase(w->id);
      if (attempt > 0 || sent > 0) throw;
    }
  }
  for (std::size_t i = 0; i < ws.size(); ++i) {
    const auto& ack = acks[i];
    if (!ack) continue;  // not confirmed
    std::unique_lock<std::mutex> lk(ack->mu);
    const bool answered =
        wait_within(ack->cv, lk, Deadline::after(options_.request_timeout), [&] { return ack->done; });
    lk.unlock();
    if (answered && !ack->error) continue;
    // None of them is started for the caller: end those that were.
    for (auto& w : ws) cancel_watch(w);
    if (!answered) {
      throw TimeoutError("store at " + where() + " did not acknowledge the " + describe(*ws[i]) + " within " +
                         std::to_string(options_.request_timeout.count()) + " ms");
    }
    std::rethrow_exception(ack->error);
  }
  return ws;
}

void TcpStore::Impl::on_watch_reply(const std::shared_ptr<WatchState>& w, Response resp) {
  switch (resp.status) {
    case Status::kEvent: {
      std::lock_guard<std::mutex> lk(w->cb_mu);
      if (w->cancelled) return;
      // One frame is one revision, delivered whole: after a resume the server
      // may repeat a revision already delivered, never part of one.
      if (resp.revision <= w->resume_after) return;
      for (auto& item : resp.items) {
        if (item.revision <= w->resume_after) continue;
        // Callbacks see one delete event per key, however the server packed them.
        for (auto& one : expand_delete_runs(std::move(item))) {
          WatchEvent ev;
          ev.type = one.kind == ItemKind::kDelete ? EventType::kDelete : EventType::kPut;
          ev.key = std::move(one.key);
          ev.value = std::move(one.value);
          ev.revision = one.revision;
          try {
            w->on_event(ev);
          } catch (const std::exception& e) {
            log::get("store.client")->warn("watch callback threw prefix={} error={}", w->prefix, e.what());
          }
        }
      }
      w->resume_after = std::max(w->resume_after, resp.revision);
      return;
    }
    case Status::kOk:
      if (auto ack = std::exchange(w->ack, nullptr)) {
        // A watch "from now" resumes after the revision the server started it at.
        if (w->resume_after < 0 && w->from_revision <= 0 && resp.revision > 0) {
          w->resume_after = resp.revision;
        }
        ack->complete(std::move(resp));
      }
      return;
    case Status::kShuttingDown:
      // The connection closes next and the watch resumes elsewhere. A server
      // stopping gracefully says up to which revision it sent this watch every
      // event: resuming after it needs no history the restarted server lacks.
      if (resp.revision > w->resume_after) w->resume_after = resp.revision;
      return;
    default:
      break;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    watches_.erase(w->id);
  }
  if (resp.status == Status::kCancelled) return;
  std::string why = describe(*w) + " failed at store " + where() + ": " + status_name(resp.status);
  if (!resp.message.empty()) why += ": " + resp.message;
  if (resp.status == Status::kCompacted) {
    why += "; list() again and watch from its revision + 1";
  }
  if (auto ack = std::exchange(w->ack, nullptr)) {
    ack->fail(resp.status == Status::kCompacted ? std::make_exception_ptr(CompactedError(why))
                                                : std::make_exception_ptr(StoreError(why)));
    return;
  }
  std::lock_guard<std::mutex> lk(w->cb_mu);
  if (w->cancelled.exchange(true) || !w->on_error) return;
  try {
    w->on_error(why);
  } catch (const std::exception& e) {
    log::get("store.client")->warn("watch error callback threw prefix={} error={}", w->prefix, e.what());
  }
}

void TcpStore::Impl::resend_watches() {
  std::vector<std::shared_ptr<WatchState>> watches;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [id, w] : watches_) {
      if (w->sent_on == connect_epoch_) continue;
      w->sent_on = connect_epoch_;
      watches.push_back(w);
    }
  }
  std::string frame;
  for (auto& w : watches) {
    Request req;
    req.op = Op::kWatch;
    req.a = kWatchDeleteRuns;
    req.id = w->id;  // ids are unique for the client's life, so reusing it is safe
    req.keys.push_back(w->prefix);
    req.b = w->resume_after >= 0 ? w->resume_after + 1 : w->from_revision;
    frame.clear();
    encode_request(req, frame);
    try {
      write_frame(frame);
    } catch (const NetworkError&) {
      return;  // the read side sees the break and starts the next cycle
    }
  }
}

void TcpStore::Impl::fail_watches(const std::string& reason) {
  std::vector<std::shared_ptr<WatchState>> watches;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [id, w] : watches_) watches.push_back(w);
    watches_.clear();
  }
  for (auto& w : watches) {
    if (auto ack = std::exchange(w->ack, nullptr)) {
      ack->fail(std::make_exception_ptr(NetworkError(reason)));
      continue;
    }
    std::lock_guard<std::mutex> lk(w->cb_mu);
    if (w->cancelled.exchange(true) || !w->on_error) continue;
    try {
      w->on_error(describe(*w) + " ended: " + reason);
    } catch (const std::exception& e) {
      log::get("store.client")->warn("watch error callback threw prefix={} error={}", w->prefix, e.what());
    }
  }
}

void TcpStore::Impl::cancel_watch(const std::shared_ptr<WatchState>& w) {
  bool removed = false;
  bool connected = false;
  Request req;
  req.op = Op::kCancel;
  req.a = w->id;
  req.b = kCancelQuiet;  // nobody reads its answers
  {
    std::lock_guard<std::mutex> lk(mu_);
    removed = watches_.erase(w->id) > 0;
    connected = connected_;
    req.id = next_id_++;
    if (next_id_ == 0) next_id_ = 1;
  }
  if (thread_.get_id() == std::this_thread::get_id()) {
    w->cancelled = true;  // inside a callback, which already holds cb_mu
  } else {
    // Waits out a callback running now, so none runs after cancel() returns.
    std::lock_guard<std::mutex> lk(w->cb_mu);
    w->cancelled = true;
  }
  if (!removed || !connected) return;
  std::string frame;
  encode_request(req, frame);
  // Nobody waits for the answer, and events the server still sends are dropped
  // here: the cancel goes out with the next request (one write, not two).
  defer_frame(frame);
}

}  // namespace ddp::store
