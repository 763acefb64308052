#include "round_monitor.hpp"

#include <utility>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "keys.hpp"

namespace ddp::rdzv {

const char* event_name(RoundEvent e) {
  switch (e) {
    case RoundEvent::kRestartRequested:
      return "restart_requested";
    case RoundEvent::kMembershipChanged:
      return "membership_changed";
    case RoundEvent::kNodesWaiting:
      return "nodes_waiting";
    case RoundEvent::kStoreLost:
      return "store_lost";
    case RoundEvent::kJobClosed:
      return "job_closed";
    case RoundEvent::kLeaseLost:
      return "lease_lost";
  }
  return "unknown";
}

}  // namespace ddp::rdzv

namespace ddp::rdzv::detail {

namespace {
bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
}  // namespace

std::string encode_event(RoundEvent e, const std::string& detail) {
  // Losing the store or its own lease is this node's news; for the others it
  // is a member leaving, and they must not kill their workers for it.
  if (e == RoundEvent::kStoreLost || e == RoundEvent::kLeaseLost) e = RoundEvent::kMembershipChanged;
  return std::to_string(static_cast<int>(e)) + " " + detail;
}

std::pair<RoundEvent, std::string> decode_event(const std::string& text) {
  auto sp = text.find(' ');
  auto code = store::keys::index_or_none(std::string_view(text).substr(0, sp));
  std::string detail = sp == std::string::npos ? "" : text.substr(sp + 1);
  if (code < 0 || code > static_cast<int>(RoundEvent::kJobClosed)) {
    return {RoundEvent::kRestartRequested, text};
  }
  return {static_cast<RoundEvent>(code), detail};
}

RoundMonitor::RoundMonitor(std::shared_ptr<store::Store> store, std::chrono::milliseconds keep_alive_interval,
                           std::chrono::milliseconds keep_alive_window, std::string store_name)
    : store_(std::move(store)),
      store_name_(std::move(store_name)),
      interval_(keep_alive_interval),
      ttl_(keep_alive_window),
      fence_margin_(fence_margin(keep_alive_interval)),
      keepalive_(std::make_shared<Keepalive>()) {
  keepalive_->store = store_;
  keepalive_->last_ok = Clock::now();
  keepalive_->acked_send = keepalive_->last_ok;
  keepalive_->backstop = ttl_ - fence_margin_ / 2;
  keepalive_->on_lease_lost = [this](store::LeaseId id, const std::string& why) { on_lease_lost(id, why); };
  thread_ = std::thread([this] { loop(); });
  keepalive_thread_ = std::thread(keepalive_loop, keepalive_, interval_);
}

RoundMonitor::~RoundMonitor() {
  stop_departures();
  end();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  {
    std::lock_guard<std::mutex> lock(keepalive_->mu);
    keepalive_->stop = true;
    keepalive_->on_lease_lost = nullptr;
    keepalive_->fence_sink = nullptr;
  }
  keepalive_->cv.notify_all();
  // A keepalive blocked on an unreachable store must not hold up the agent's exit.
  keepalive_thread_.detach();
}

void RoundMonitor::set_callback(RoundEventCallback cb) {
  std::lock_guard<std::mutex> lock(mu_);
  callback_ = std::move(cb);
}

void RoundMonitor::set_departure_callback(DepartureCallback cb) {
  std::lock_guard<std::mutex> lock(mu_);
  departure_callback_ = std::move(cb);
}

void RoundMonitor::set_newcomer_callback(std::function<void(std::int64_t, const std::string&)> cb) {
  std::lock_guard<std::mutex> lock(mu_);
  newcomer_callback_ = std::move(cb);
}

void RoundMonitor::begin(WatchedRound r) {
  std::uint64_t epoch = 0;
  const std::string prefix = r.prefix;
  const auto node_from = r.node_from;
  const auto ctl_from = r.ctl.revision + 1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    epoch = ++epoch_;
    active_ = true;
    fired_mask_ = 0;
    first_event_.reset();
    marker_seen_ = false;
    departed_.clear();
    gone_workers_.clear();
    waiting_ = 0;
    for (const auto& kv : r.ctl.kvs) {
      queue_.push_back(
          Pending{epoch, store::WatchEvent{store::EventType::kPut, kv.key, kv.value, kv.revision}});
    }
    round_ = std::move(r);
  }
  cv_.notify_all();
  auto on_event = [this, epoch](const store::WatchEvent& ev) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(Pending{epoch, ev});
    }
    cv_.notify_all();
  };
  auto on_error = [this, epoch](const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(Pending{epoch, store::WatchEvent{store::EventType::kDelete, "", why, 0}, true});
    }
    cv_.notify_all();
  };
  std::vector<store::WatchSpec> specs;
  // From known revisions: not confirmed, so sent without a round trip; a
  // refusal comes to on_error, as a watch that fails later does.
  specs.push_back(store::WatchSpec{detail::nodes_prefix(prefix), node_from, on_event, on_error, false});
  specs.push_back(store::WatchSpec{prefix + "ctl/", ctl_from, on_event, on_error, false});
  auto handles = store_->watch_all(std::move(specs));
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& h : handles) watches_.push_back(std::move(h));
}

std::optional<std::pair<RoundEvent, std::string>> RoundMonitor::end() { return finish(nullptr, nullptr); }

std::optional<std::pair<RoundEvent, std::string>> RoundMonitor::end(
    std::function<void(std::int64_t)> on_departure, std::set<std::int64_t>& departed) {
  stop_departures();
  return finish(std::move(on_departure), &departed);
}

std::optional<std::pair<RoundEvent, std::string>> RoundMonitor::finish(
    std::function<void(std::int64_t)> on_departure, std::set<std::int64_t>* departed) {
  std::vector<std::unique_ptr<store::WatchHandle>> handles;
  std::optional<std::pair<RoundEvent, std::string>> first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (departed != nullptr && active_ && !watches_.empty()) {
      // Events of the old epoch still queued or yet to come reach the sink.
      departure_epoch_ = epoch_;
      departure_prefix_ = detail::nodes_prefix(round_.prefix);
      departure_round_prefix_ = round_.prefix;
      departure_sink_ = std::move(on_departure);
      departure_watch_ = std::move(watches_.front());
      *departed = departed_;
    }
    active_ = false;
    ++epoch_;
    handles.swap(watches_);
    first = first_event_;
    ended_marker_seen_ = std::exchange(marker_seen_, false);
  }
  { std::lock_guard<std::mutex> wait_out_callback(callback_mu_); }
  // Cancelling waits out a running watch callback, which takes mu_: not under it.
  for (auto& h : handles) {
    if (h) h->cancel();  // the node watch moved to departure_watch_ leaves a null
  }
  return first;
}

bool RoundMonitor::ended_marker_seen() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_marker_seen_;
}

void RoundMonitor::stop_departures() {
  std::unique_ptr<store::WatchHandle> handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handle = std::move(departure_watch_);
    departure_sink_ = nullptr;
    departure_epoch_ = 0;
  }
  // A sink call running now holds callback_mu_.
  { std::lock_guard<std::mutex> wait_out_callback(callback_mu_); }
  if (handle) handle->cancel();
}

void RoundMonitor::suppress(RoundEvent e) {
  std::lock_guard<std::mutex> lock(mu_);
  fired_mask_ |= static_cast<std::uint8_t>(1u << static_cast<int>(e));
}

Clock::time_point RoundMonitor::fence_until() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_departure_ == Clock::time_point{} ? last_departure_ : last_departure_ + fence_margin_;
}

std::optional<RoundMonitor::Departure> RoundMonitor::read_departure(const std::string& round_prefix,
                                                                    std::int64_t rank) {
  const std::string g = std::to_string(rank);
  try {
    const auto v = store_->multi_get({round_prefix + "success/" + g, round_prefix + "stopped/" + g});
    return Departure{v[0].has_value(), v[1].has_value()};
  } catch (const Error& e) {
    log::get("rdzv")->debug("cannot tell how group rank {} of {} left: {}", rank, round_prefix, e.what());
    return std::nullopt;
  }
}

void RoundMonitor::note_departure(const std::optional<Departure>& d) {
  // Only a node that may still be running workers is fenced: not one that
  // succeeded, nor one that stopped its workers and left on purpose. One the
  // store cannot tell about counts, which only delays the next round.
  if (d && (d->succeeded || d->stopped)) return;
  std::lock_guard<std::mutex> lock(mu_);
  last_departure_ = Clock::now();
}

void RoundMonitor::loop() {
  // Silence is checked a few times per keep-alive interval, and at the fence
  // deadline itself: the workers' kill must not wait for the next check.
  const auto check_period = std::max(interval_ / 4, std::chrono::milliseconds(10));
  auto next_wakeup = [&](bool stalled) {
    const auto now = Clock::now();
    const auto deadline = fence_deadline();
    const auto next = now + (stalled ? interval_ : check_period);
    return !stalled && deadline > now ? std::min(next, deadline) : next;
  };
  auto next_check = next_wakeup(false);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait_until(lock, next_check, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    if (!queue_.empty()) {
      Pending p = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      handle(p);
      lock.lock();
      continue;
    }
    if (Clock::now() >= next_check) {
      // Woken far later than planned: this process was stopped (SIGSTOP) or
      // starved. The keepalive thread woke too; its answer (maybe "lease gone":
      // rejoin) gets one interval before the silence is blamed on the store.
      const bool stalled = Clock::now() - next_check > interval_;
      lock.unlock();
      if (!stalled) check_store_silence();
      // Not under mu_: the keepalive thread takes the keepalive lock, then mu_.
      next_check = next_wakeup(stalled);
      lock.lock();
    }
  }
}

void RoundMonitor::handle(const Pending& p) {
  WatchedRound r;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (p.epoch != epoch_ || !active_) {
      if (p.epoch == 0 || p.epoch != departure_epoch_ || p.error || p.ev.type != store::EventType::kDelete ||
          !starts_with(p.ev.key, departure_prefix_)) {
        return;
      }
      const auto rank =
          store::keys::index_or_none(std::string_view(p.ev.key).substr(departure_prefix_.size()));
      const std::string round_prefix = departure_round_prefix_;
      lock.unlock();
      if (rank >= 0) note_departure(read_departure(round_prefix, rank));
      std::lock_guard<std::mutex> callback_lock(callback_mu_);
      std::function<void(std::int64_t)> sink;
      {
        std::lock_guard<std::mutex> relock(mu_);
        if (p.epoch == departure_epoch_) sink = departure_sink_;
      }
      if (sink && rank >= 0) sink(rank);
      return;
    }
    r.prefix = round_.prefix;
    r.self_rank = round_.self_rank;
    r.self_id = round_.self_id;
    r.group_world_size = round_.group_world_size;
    r.can_grow = round_.can_grow;
  }
  if (p.error) {
    fire(p.epoch, RoundEvent::kStoreLost,
         "watch of " + r.prefix + " on " + store_name_ + " ended: " + p.ev.value);
    return;
  }
  if (!starts_with(p.ev.key, r.prefix)) return;
  const std::string rel = p.ev.key.substr(r.prefix.size());
  const bool put = p.ev.type == store::EventType::kPut;
  if (starts_with(rel, "node/")) {
    const auto rank = store::keys::index_or_none(std::string_view(rel).substr(5));
    if (rank < 0 || rank == r.self_rank) return;
    if (put) {
      // A hot spare took a departed member's place, or a newcomer grew the
      // round by a group rank (take_places). A newcomer's arrival record,
      // put and removed before it found the round closed, is neither.
      auto node = take_record(p.ev.value, p.ev.key);
      if (!node) return;
      if (rank >= r.group_world_size) {
        bool growing = false;  // only where newcomers may grow the round: no read per late arrival elsewhere
        {
          std::lock_guard<std::mutex> lock(mu_);
          growing = static_cast<bool>(newcomer_callback_);
        }
        if (!growing || !grown(r.prefix, rank, node->node_id, p.ev.revision)) return;
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (p.epoch == epoch_) {
        departed_.erase(rank);
        if (rank >= round_.group_world_size) round_.group_world_size = static_cast<int>(rank) + 1;
        set_node(static_cast<int>(rank), std::move(*node));
      }
      return;
    }
    if (rank >= r.group_world_size) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (p.epoch == epoch_) departed_.insert(rank);
    }
    // A node that succeeded and left is not a failure: its success key was written
    // before its lease went away. A store that cannot answer cannot tell us who
    // left either; losing it is reported by the watch or the keep-alive instead.
    const auto departure = read_departure(r.prefix, rank);
    note_departure(departure);
    if (departure && !departure->succeeded) {
      const std::string reason = "its lease expired or was revoked";
      const std::string detail = describe_rank(static_cast<int>(rank)) + " left the round: " + reason;
      if (!depart(p.epoch, static_cast<int>(rank), p.ev.revision, detail, reason))
        fire(p.epoch, RoundEvent::kMembershipChanged, detail);
    }
  } else if (rel == "ctl/waiting") {
    const auto waiting = put ? store::keys::index_or_none(p.ev.value) : 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (p.epoch == epoch_) waiting_ = waiting;
    }
    if (r.can_grow && waiting > 0) {
      const std::string detail = p.ev.value + " node(s) waiting to join";
      if (!newcomer(p.epoch, detail)) fire(p.epoch, RoundEvent::kNodesWaiting, detail);
    }
  } else if (const auto gone = store::keys::gone_prefix(r.prefix); put && starts_with(p.ev.key, gone)) {
    const auto rank = store::keys::index_or_none(std::string_view(p.ev.key).substr(gone.size()));
    auto node = take_record(p.ev.value, p.ev.key);
    if (rank < 0 || !node) return;
    std::int64_t waiting = 0;
    bool was_full = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (p.epoch != epoch_) return;
      gone_workers_[static_cast<int>(rank)] = node->local_world_size;
      // The job went on without that place: below MAX, so a node waiting
      // beside the round (a spare that did not take the place, or a newcomer
      // that came meanwhile) may grow it (docs/reform.md, "A node that joins later").
      if (!newcomer_callback_) return;
      was_full = !round_.can_grow;
      round_.can_grow = true;
      waiting = waiting_;
    }
    if (was_full && waiting > 0) newcomer(p.epoch, std::to_string(waiting) + " node(s) waiting to join");
  } else if (rel == "ctl/ended") {
    if (put) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (p.epoch == epoch_) marker_seen_ = true;
      }
      auto [e, detail] = decode_event(p.ev.value);
      fire(p.epoch, e, detail);
    }
  }
}

bool RoundMonitor::depart(std::uint64_t epoch, int rank, store::Revision revision, const std::string& detail,
                          const std::string& reason) {
  std::lock_guard<std::mutex> callback_lock(callback_mu_);
  DepartureCallback cb;
  rdzv::Departure d;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!departure_callback_) return false;
    if (!active_ || epoch != epoch_) return true;  // the round ended meanwhile: nothing to decide
    // A round that ends anyway (an event fired) re-forms from scratch.
    if (fired_mask_ != 0) return true;
    cb = departure_callback_;
    d.round = round_.round;
    d.group_rank = rank;
    if (rank < static_cast<int>(round_.nodes.size())) d.node = round_.nodes[static_cast<std::size_t>(rank)];
    describe_places(rank, d);
    d.revision = revision;
    d.detail = detail;
    d.reason = reason;
  }
  log::get("rdzv")->info("member left round={} group_rank={} revision={}: {}", d.round, rank, revision,
                         detail);
  cb(d);
  return true;
}

bool RoundMonitor::newcomer(std::uint64_t epoch, const std::string& detail) {
  std::lock_guard<std::mutex> callback_lock(callback_mu_);
  std::function<void(std::int64_t, const std::string&)> cb;
  std::int64_t round = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!newcomer_callback_) return false;
    if (!active_ || epoch != epoch_ || fired_mask_ != 0) return true;
    cb = newcomer_callback_;
    round = round_.round;
  }
  cb(round, detail);
  return true;
}

bool RoundMonitor::grown(const std::string& prefix, std::int64_t rank, const std::string& node_id,
                         store::Revision put_revision) {
  // The newcomer claimed the group rank (P/grow/<g>) before it put its record there.
  const std::string key = store::keys::grow_key(prefix, rank);
  try {
    for (const auto& kv : store_->list(key).kvs) {
      if (kv.key == key && store::keys::parse_grow_value(kv.value).first == node_id &&
          kv.revision < put_revision)
        return true;
    }
  } catch (const Error& e) {
    log::get("rdzv")->debug("cannot read {}: {}", key, e.what());
  }
  return false;
}

std::optional<NodeSpec> RoundMonitor::take_record(const std::string& value, const std::string& key) {
  try {
    return detail::decode_node(value, key);
  } catch (const Error&) {
    return std::nullopt;
  }
}

void RoundMonitor::describe_places(int rank, rdzv::Departure& d) const {
  // A place given up before this node came has no record here: it counts
  // among no members, and below `rank` its ranks (ctl/gone/) still come first.
  // In a large round whose records were not read (nodes_listed), a place
  // without a record runs as many workers as this node.
  const auto self = static_cast<std::size_t>(round_.self_rank);
  const int unread =
      !round_.nodes_listed && self < round_.nodes.size() ? round_.nodes[self].local_world_size : 0;
  int offset = 0;
  bool known = true;
  for (int g = 0; g < static_cast<int>(round_.nodes.size()); ++g) {
    const NodeSpec& n = round_.nodes[static_cast<std::size_t>(g)];
    int nproc = n.local_world_size;
    if (n.node_id.empty() && unread > 0) {
      nproc = unread;
    } else if (n.node_id.empty()) {
      if (g >= rank) continue;
      const auto gone = gone_workers_.find(g);
      if (gone == gone_workers_.end()) {
        known = false;
      } else {
        offset += gone->second;
      }
      continue;
    }
    if (g < rank) offset += nproc;
    ++d.members;
    d.workers += nproc;
  }
  if (known && rank < static_cast<int>(round_.nodes.size())) d.rank_offset = offset;
}

void RoundMonitor::set_node(int rank, NodeSpec node) {
  if (rank >= static_cast<int>(round_.nodes.size())) round_.nodes.resize(static_cast<std::size_t>(rank) + 1);
  round_.nodes[static_cast<std::size_t>(rank)] = std::move(node);
}

void RoundMonitor::fire(std::uint64_t epoch, RoundEvent e, const std::string& detail) {
  std::lock_guard<std::mutex> callback_lock(callback_mu_);
  RoundEventCallback cb;
  std::int64_t round = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active_ || epoch != epoch_) return;
    const auto bit = static_cast<std::uint8_t>(1u << static_cast<int>(e));
    if (fired_mask_ & bit) return;
    fired_mask_ |= bit;
    if (!first_event_) first_event_ = std::make_pair(e, detail);
    cb = callback_;
    round = round_.round;
  }
  log::get("rdzv")->info("round event event={} round={} detail={}", event_name(e), round, detail);
  if (cb) cb(round, e, detail);
}

std::string RoundMonitor::describe_rank(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (rank >= 0 && rank < static_cast<int>(round_.nodes.size()) &&
      !round_.nodes[static_cast<std::size_t>(rank)].node_id.empty()) {
    return "node " + round_.nodes[static_cast<std::size_t>(rank)].node_id + " (group rank " +
           std::to_string(rank) + ")";
  }
  return "the node of group rank " + std::to_string(rank);
}

}  // namespace ddp::rdzv::detail
