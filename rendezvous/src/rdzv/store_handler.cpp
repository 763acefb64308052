#include "store_handler.hpp"

#include <thread>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/rdzv/backend.hpp"
#include "ddp/store/tcp_store.hpp"
#include "keys.hpp"

namespace ddp::rdzv::detail {

namespace {

// How long a host that closed the job keeps its store for the others to read
// why: twice a static waiter's progress tick (static_handler.cpp).
constexpr std::chrono::milliseconds kClosedJobBarrier{2000};

// What a lost-store message names: the endpoint the user typed.
std::string store_name(const RendezvousConfig& c) {
  if (const auto b = parse_backend(c.backend); b && uses_etcd(*b)) {
    std::string eps;
    for (const auto& ep : c.etcd.endpoints) eps.append(eps.empty() ? "" : ",").append(ep.to_string());
    return "etcd at " + (eps.empty() ? c.endpoint.to_string() : eps);
  }
  return "the rendezvous store at " + c.endpoint.to_string();
}

}  // namespace

StoreHandler::StoreHandler(const RendezvousConfig& config, const NodeSpec& self, StoreAccess access)
    : config_(config),
      self_(self),
      access_(std::move(access)),
      store_(access_.client),
      monitor_(std::make_unique<RoundMonitor>(store_, config.keep_alive_interval, keep_alive_window(config),
                                              store_name(config))),
      rdzv_prefix_(rdzv_prefix(config.run_id)) {
  // A lease is bound to the connection that granted it: after a reconnect,
  // learn at once whether it is gone (and the workers must die) rather than
  // at the next keep-alive (docs/rendezvous.md, "Fencing").
  if (auto tcp = std::dynamic_pointer_cast<store::TcpStore>(store_)) {
    tcp->on_reconnect([m = monitor_.get()] { m->keepalive_now(); });
  }
  // A store in this process cannot be cut off from this node.
  if (!access_.server && config.on_fence_deadline) monitor_->set_fence_sink(config.on_fence_deadline);
}

StoreHandler::~StoreHandler() {
  if (auto tcp = std::dynamic_pointer_cast<store::TcpStore>(store_)) tcp->on_reconnect(nullptr);
  monitor_->stop_departures();
  rejoin_.reset();
  monitor_->end();
  // The agent destroys the handler once its workers are gone: saying so lets
  // the others re-form without waiting out the fence for this node.
  std::string stopped_key;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (current_)
      stopped_key = prefix_of(current_->round) + "stopped/" + std::to_string(current_->group_rank);
  }
  monitor_->revoke(std::chrono::milliseconds(1000), stopped_key);
  if (access_.server) wait_for_members_to_leave();
  monitor_.reset();
  store_.reset();
  access_.client.reset();
  if (access_.server) access_.server->stop();
}

void StoreHandler::wait_for_members_to_leave() {
  // The exit barrier of a job whose every node succeeded: the node hosting the
  // store keeps it up until the other members, who may still be between two
  // polls of "done", have seen it and left (each revokes its lease on exit, so
  // its node record vanishes). A member that died instead vanishes when its
  // lease expires, which bounds the wait by the keep-alive window. The same
  // when this node closed the job: a static node waiting for the others reads
  // the reason at its next progress tick (a second), not a store that is gone.
  std::chrono::milliseconds wait = keep_alive_window(config_) + std::chrono::milliseconds(500);
  std::optional<std::int64_t> round;
  std::optional<int> coming;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_round_) {
      // After a close the others only need to read why: watchers at once, a
      // static waiter at its next tick. A member still stopping its workers
      // does not hold this node up for the whole window.
      round = closed_round_;
      coming = closed_on_rank_;
      wait = std::min(wait, kClosedJobBarrier);
    } else if (done_seen_ && current_ && current_->group_world_size > 1) {
      round = current_->round;
    }
  }
  if (!round) return;
  const auto deadline = Deadline::after(wait);
  const std::string nodes = nodes_prefix(prefix_of(*round));
  auto delay = std::chrono::milliseconds(2);
  try {
    // A node that passed the check this node failed writes its record right
    // after: gone before it did, the store would leave it nothing to read.
    if (coming && !deadline.expired()) {
      try {
        store_->wait({node_key(prefix_of(*round), *coming)}, deadline.remaining());
      } catch (const TimeoutError&) {
        // It never came: the list below sees who still holds the store.
      }
    }
    while (!store_->list(nodes).kvs.empty()) {
      if (deadline.expired()) {
        log::get("rdzv")->warn("stopping the rendezvous store while other nodes still hold it");
        return;
      }
      std::this_thread::sleep_for(delay);
      delay = std::min(delay * 2, std::chrono::milliseconds(50));
    }
  } catch (const Error& e) {
    log::get("rdzv")->debug("exit barrier: {}", e.what());
  }
}

void StoreHandler::throw_closed(const std::string& reason) const {
  if (reason.starts_with(kClosedByExclusion)) {
    throw ExcludedError("rendezvous of run_id=" + config_.run_id + " is closed: " + reason);
  }
  throw RendezvousError("rendezvous of run_id=" + config_.run_id + " is closed: " + reason +
                        "; start the job again with a new --rdzv_id");
}

std::int64_t StoreHandler::round_to_join(std::vector<store::BatchOp>* defer,
                                         std::vector<store::BatchOp>* with_first) {
  std::optional<RendezvousResult> prev;
  {
    std::lock_guard<std::mutex> lock(mu_);
    prev = current_;
    current_.reset();
    reported_success_ = false;
    done_seen_ = false;
  }
  if (with_first != nullptr && (prev || joined_once_)) with_first->clear();
  if (!prev) {
    if (!joined_once_) {
      joined_once_ = true;
      // The first join also learns, in the same write, whether this host was
      // excluded from the job (docs/rendezvous.md, "Bad nodes kept out"); the
      // caller's first writes go with it.
      std::vector<store::BatchOp> ops;
      ops.push_back(store::BatchOp::try_get(round_pointer_key(config_.run_id)));
      ops.push_back(store::BatchOp::try_get(rdzv_key("closed")));
      ops.push_back(store::BatchOp::try_get(store::keys::excluded_key(config_.run_id, self_.host)));
      constexpr std::size_t kReads = 3;
      if (with_first != nullptr) {
        for (auto& op : *with_first) ops.push_back(std::move(op));
      }
      store_->batch(ops);
      if (with_first != nullptr) {
        for (std::size_t i = 0; i < with_first->size(); ++i) (*with_first)[i] = std::move(ops[kReads + i]);
      }
      for (std::size_t i = 0; i < kReads; ++i) {
        if (ops[i].error) std::rethrow_exception(ops[i].error);
      }
      if (ops[1].found) throw_closed(ops[1].result);
      if (ops[2].found) throw_excluded(ops[2].result);
      return store::keys::counter_value(ops[0].found ? std::optional(ops[0].result) : std::nullopt);
    }
    // A previous call failed before a round closed: try the job's current round.
    auto p = store_->try_get(round_pointer_key(config_.run_id));
    return store::keys::counter_value(p);
  }
  // Pass on why we leave (the first event we saw), so every member restarts
  // for the same reason; with no event, this node itself chose to restart.
  // The round's node watch stays: it tells the next round who is gone.
  std::set<std::int64_t> gone;
  auto rejoin = std::make_shared<RejoinWatch>(PreviousRound{prev->round, prev->group_world_size}, gone);
  auto first = monitor_->end([rejoin](std::int64_t rank) { rejoin->departed(rank); }, gone);
  for (auto rank : gone) rejoin->departed(rank);
  rejoin_ = rejoin;
  std::vector<store::BatchOp> ops;
  // A member that saw the marker knows it is written (a failure report writes
  // it, and the first member to move on): one request less per member.
  if (!monitor_->ended_marker_seen()) {
    auto why =
        first ? *first
              : std::make_pair(RoundEvent::kRestartRequested,
                               "node " + self_.node_id + " started round " + std::to_string(prev->round + 1));
    ops.push_back(store::BatchOp::compare_set(prefix_of(prev->round) + "ctl/ended", "",
                                              encode_event(why.first, why.second)));
  }
  ops.push_back(advance_pointer_op(prev->round));
  if (defer != nullptr) {
    for (auto& op : ops) defer->push_back(std::move(op));
  } else {
    store_->batch(ops);
    store::rethrow_first_error(ops);
  }
  return prev->round + 1;
}

store::BatchOp StoreHandler::advance_pointer_op(std::int64_t round) const {
  // Only this chain of compare_sets writes the pointer, so "missing" means 0.
  return store::BatchOp::compare_set(round_pointer_key(config_.run_id),
                                     round == 0 ? "" : std::to_string(round), std::to_string(round + 1));
}

void StoreHandler::advance_pointer(std::int64_t round) {
  auto op = advance_pointer_op(round);
  store_->compare_set(op.key, op.expected, op.value);
}

void StoreHandler::start_round(const RendezvousResult& result, store::Revision node_from, bool can_grow,
                               std::optional<store::Revision> ctl_from) {
  const std::string prefix = prefix_of(result.round);
  WatchedRound w;
  w.round = result.round;
  w.prefix = prefix;
  w.self_rank = result.group_rank;
  w.self_id = self_.node_id;
  w.group_world_size = result.group_world_size;
  w.can_grow = can_grow;
  w.nodes = result.nodes;
  w.nodes_listed = result.nodes_listed;
  w.node_from = node_from;
  // Watching ctl/ from a revision no control key predates, or else from a
  // listing's revision + 1, loses no failure that a faster member reported
  // before this node got here.
  if (ctl_from) {
    w.ctl.revision = *ctl_from - 1;
  } else {
    w.ctl = store_->list(prefix + "ctl/");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = result;
    closed_members_ = result.group_world_size;
  }
  monitor_->stop_departures();
  rejoin_.reset();
  monitor_->begin(std::move(w));
  log::get("rdzv")->info(
      "round closed run_id={} round={} group_rank={} group_world_size={} rank_offset={} "
      "world_size={}",
      config_.run_id, result.round, result.group_rank, result.group_world_size, result.rank_offset,
      result.world_size);
}

void StoreHandler::report_failure(const std::string& reason) {
  std::optional<RendezvousResult> cur;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cur = current_;
  }
  if (!cur) return;
  monitor_->suppress(RoundEvent::kRestartRequested);
  // The failure ends the round: one write that every member's ctl/ watch
  // delivers once, and whoever moves on first finds the marker already there.
  store_->compare_set(prefix_of(cur->round) + "ctl/ended", "",
                      encode_event(RoundEvent::kRestartRequested,
                                   "node " + self_.node_id + std::string(kReportedFailure) + reason));
}

void StoreHandler::report_success() {
  std::optional<RendezvousResult> cur;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!current_ || reported_success_) return;
    reported_success_ = true;
    cur = current_;
  }
  const std::string prefix = prefix_of(cur->round);
  // The success key goes first: when this node's lease later vanishes, the others
  // find it and do not take the departure for a failure.
  store_->set(prefix + "success/" + std::to_string(cur->group_rank), "1");
  if (store_->add(prefix + "succeeded", 1) >= members_to_succeed(prefix)) store_->set(prefix + "done", "1");
}

std::int64_t StoreHandler::members_to_succeed(const std::string& prefix) {
  std::int64_t closed = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed = closed_members_;
  }
  // Newcomers that grew the round (docs/reform.md, "A node that joins later") count too.
  return closed + store::keys::counter_value(store_->try_get(grown_key(prefix)));
}

bool StoreHandler::all_succeeded() {
  std::optional<RendezvousResult> cur;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cur = current_;
  }
  if (!cur) return false;
  if (!store_->try_get(prefix_of(cur->round) + "done").has_value()) return false;
  // Every member succeeded: from now on a member leaving is the job ending.
  monitor_->suppress(RoundEvent::kMembershipChanged);
  std::lock_guard<std::mutex> lock(mu_);
  done_seen_ = true;
  return true;
}

void StoreHandler::close(const std::string& reason) {
  const std::string why =
      reason.empty() ? "closed by node " + self_.node_id : reason + " (closed by node " + self_.node_id + ")";
  std::optional<RendezvousResult> cur;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cur = current_;
  }
  store_->set(rdzv_key("closed"), why);
  // Wake whoever waits: members of our round (ended), and joiners of the next
  // round and of the job's current round (their round can never close now).
  auto pointer = store_->try_get(round_pointer_key(config_.run_id));
  std::int64_t next = store::keys::counter_value(pointer);
  if (cur) {
    monitor_->end();
    store_->compare_set(prefix_of(cur->round) + "ctl/ended", "",
                        encode_event(RoundEvent::kRestartRequested, "the job was closed: " + why));
    next = std::max(next, cur->round + 1);
  }
  store_->compare_set(prefix_of(next) + "closed", "", "closed " + why);
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_round_ = cur ? cur->round : next;
  }
  monitor_->revoke();
  log::get("rdzv")->info("rendezvous closed run_id={} reason={}", config_.run_id, why);
}

void StoreHandler::close_while_joining(std::int64_t round, const std::string& why, std::optional<int> other) {
  store_->set(rdzv_key("closed"), why);
  store_->compare_set(prefix_of(round) + "ctl/ended", "", encode_event(RoundEvent::kJobClosed, why));
  store_->compare_set(prefix_of(round) + "closed", "", "closed " + why);
  store_->compare_set(prefix_of(round + 1) + "closed", "", "closed " + why);
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_round_ = round;
    closed_on_rank_ = other;
  }
  log::get("rdzv")->info("rendezvous closed run_id={} reason={}", config_.run_id, why);
}

void StoreHandler::set_event_callback(RoundEventCallback cb) { monitor_->set_callback(std::move(cb)); }

std::shared_ptr<store::Store> StoreHandler::store() { return store_; }

}  // namespace ddp::rdzv::detail
