#include "dynamic_handler.hpp"

#include <set>
#include <sstream>
#include <thread>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::rdzv {

namespace {

// A waiting node wakes this often to log progress (every config_.progress_interval).
constexpr std::chrono::milliseconds kProgressPeriod{1000};
constexpr int kNamesShown = 16;  // progress lines list names only for small rounds
// A departure-triggered early close waits at most this long for the counted
// arrivals' records (written right after their add, so normally at once): the
// joining thread waits for that check to return once its round closed.
constexpr std::chrono::milliseconds kDepartureCheckWait{1000};

// A closer that has waited this long for the arrivals' records checks whether
// one of those arrivals is gone, then again after twice as long, up to the cap.
constexpr std::chrono::milliseconds kRecordCheckFirst{100};
constexpr std::chrono::milliseconds kRecordCheckMax{3200};

std::string left_before_close(int gone, std::int64_t round) {
  return "abort " + std::to_string(gone) + " node(s) left before round " + std::to_string(round) + " closed";
}

const RendezvousConfig& checked(const RendezvousConfig& c) {
  detail::validate_run_id(c.run_id);
  if (c.min_nodes < 1) throw ConfigError("--nnodes: MIN must be at least 1");
  if (c.min_nodes > c.max_nodes) {
    throw ConfigError("--nnodes: MIN " + std::to_string(c.min_nodes) + " is larger than MAX " +
                      std::to_string(c.max_nodes));
  }
  if (c.max_nodes >= (1 << 30)) throw ConfigError("--nnodes: MAX is too large");
  check_keep_alive(c);
  return c;
}

std::string name_list(const std::vector<store::KeyValue>& kvs, const std::string& round_prefix, int limit) {
  std::string out;
  for (const auto& kv : kvs) {
    auto rank = detail::node_index(kv.key, round_prefix);
    if (!rank || *rank >= limit) continue;
    if (!out.empty()) out += ", ";
    try {
      auto n = detail::decode_node(kv.value, kv.key);
      out += n.node_id + " (" + std::to_string(n.local_world_size) + " workers)";
    } catch (const Error&) {
      out += kv.key;
    }
  }
  return out.empty() ? "none" : out;
}

void logger_info_last_call(const RendezvousConfig& c, std::int64_t round, int count) {
  log::get("rdzv")->info("last call over, closing the round run_id={} round={} nodes={} last_call_timeout={}",
                         c.run_id, round, count, detail::seconds_text(c.last_call_timeout));
}

// Node ids of the records of group ranks [0, n) under `round_prefix`node/.
std::set<std::string> member_ids(const std::vector<store::KeyValue>& kvs, const std::string& round_prefix,
                                 int n) {
  std::set<std::string> out;
  for (const auto& kv : kvs) {
    auto r = detail::node_index(kv.key, round_prefix);
    if (r && *r < n) out.insert(detail::decode_node(kv.value, kv.key).node_id);
  }
  return out;
}

}  // namespace

DynamicHandler::DynamicHandler(const RendezvousConfig& config, const NodeSpec& self,
                               detail::StoreAccess access, std::unique_ptr<detail::ArrivalStep> arrivals)
    : StoreHandler(checked(config), self, std::move(access)),
      arrivals_(arrivals ? std::move(arrivals) : detail::counter_arrivals(store_)) {}

DynamicHandler::Closed DynamicHandler::parse_closed(const std::string& text) {
  Closed c;
  if (text.rfind("abort ", 0) == 0) {
    c.kind = Closed::Kind::kAbort;
    c.why = text.substr(6);
  } else if (text.rfind("closed ", 0) == 0) {
    c.kind = Closed::Kind::kJobClosed;
    c.why = text.substr(7);
  } else {
    std::istringstream in(text);
    if (!(in >> c.count >> c.workers >> c.listed)) {
      throw InternalError("malformed rendezvous close record '" + text + "'");
    }
    long long fence_ms = 0;
    if (in >> fence_ms && fence_ms > 0) c.fence = std::chrono::milliseconds(fence_ms);
  }
  return c;
}

std::string DynamicHandler::final_decision(int count, int workers, store::Revision listed) const {
  std::string value = std::to_string(count) + " " + std::to_string(workers) + " " + std::to_string(listed);
  const auto left = monitor_->fence_until() - Clock::now();
  if (left > Clock::duration::zero()) {
    // Rounded up: a member must never wait less than the closer would.
    value.append(" ").append(std::to_string(std::chrono::ceil<std::chrono::milliseconds>(left).count()));
  }
  return value;
}

void DynamicHandler::wait_out_fence(std::int64_t round, const Closed& closed, Clock::time_point read_at) {
  auto until = std::max(monitor_->fence_until(), read_at + closed.fence);
  if (until <= Clock::now()) return;
  log::get("rdzv")->info(
      "fence: waiting {} before round {}'s workers start run_id={} (a member of the last round left without "
      "succeeding; were it only cut off, its workers are killed before this)",
      detail::seconds_text(std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now())), round,
      config_.run_id);
  // A member that leaves meanwhile (seen by the previous round's kept watch)
  // moves the fence on.
  while (until > Clock::now()) {
    std::this_thread::sleep_until(until);
    until = std::max(until, monitor_->fence_until());
  }
}

std::string DynamicHandler::job_config() const {
  return std::to_string(config_.min_nodes) + ":" + std::to_string(config_.max_nodes);
}

void DynamicHandler::check_job_config(std::optional<std::string> job_value) {
  if (config_checked_) return;
  const std::string mine = job_config();
  const std::string job = job_value ? *job_value : store_->compare_set(rdzv_key("nnodes"), "", mine);
  if (job != mine) {
    throw ConfigError("--nnodes: this node uses " + mine + " but run_id=" + config_.run_id +
                      " was started with --nnodes=" + job + "; use the same value on every node");
  }
  config_checked_ = true;
}

RendezvousResult DynamicHandler::next_rendezvous() {
  auto logger = log::get("rdzv");
  const auto deadline = Deadline::after(config_.join_timeout);
  // Marking the last round ended and moving the pointer go out with the arrival.
  std::vector<store::BatchOp> before;
  // A first join's check of --nnodes and its lease grant go in the same write
  // as its read of the job's round.
  std::vector<store::BatchOp> first;
  if (!config_checked_) first.push_back(store::BatchOp::compare_set(rdzv_key("nnodes"), "", job_config()));
  if (auto grant = monitor_->lease_grant_op()) first.push_back(std::move(*grant));
  const auto sent = Clock::now();
  std::int64_t round = round_to_join(&before, &first);
  for (auto& op : first) {
    if (op.kind == store::BatchOp::Kind::kCompareSet) {
      if (op.error) std::rethrow_exception(op.error);
      check_job_config(op.result);
    } else if (!op.error) {
      monitor_->adopt_lease(op.number, sent);  // failed: lease() below asks again
    }
  }
  check_job_config();
  const auto lease = monitor_->lease();
  const std::string record = detail::encode_node(self_);
  while (true) {
    const std::string prefix = prefix_of(round);
    // Arrival index in the high half, prefix sum of workers in the low.
    const std::int64_t mine = arrivals_->arrive(prefix, self_, lease, std::exchange(before, {}));
    const int index = detail::packed_count(mine);  // 1-based
    const std::string my_key = detail::node_key(prefix, index - 1);
    bool late = index > config_.max_nodes;
    // Past MAX this node writes no record: its marker would read as a slow arrival's.
    if (late && lease != 0) store_->remove(store::keys::joining_key(prefix, self_.node_id));
    Closed closed;
    if (!late) {
      closed = arrive_and_wait(round, mine, store::BatchOp::set(my_key, record, lease), deadline);
      if (closed.kind == Closed::Kind::kJobClosed) throw_closed(closed.why);
      if (closed.kind == Closed::Kind::kAbort) {
        // Nobody of this round starts workers; meet again in the next one.
        logger->info("round aborted run_id={} round={} reason={}", config_.run_id, round, closed.why);
        store_->compare_set(prefix + "ctl/ended", "",
                            detail::encode_event(RoundEvent::kMembershipChanged, closed.why));
        advance_pointer(round);
        ++round;
        continue;
      }
      late = index > closed.count;
      if (late) store_->remove(my_key);
    }
    const auto decided_at = Clock::now();
    if (late && store_->try_get(prefix + "done")) throw_finished(round, false);
    if (late) {
      // Past MAX, or past the count of a round that closed at MAX: a hot
      // spare, unless the running round gave places up (the job went on
      // without a lost node): each makes room for a newcomer to grow it again.
      const bool at_max = index > config_.max_nodes || closed.count == config_.max_nodes;
      const bool given_up = config_.take_places && at_max && given_up_places(prefix) > 0;
      if (at_max && !given_up) register_spare(round, closed);
      bool counted = false;
      const bool room =
          given_up || (index <= config_.max_nodes && closed.count > 0 && closed.count < config_.max_nodes);
      if (config_.take_places && ((spare_of_ && spare_of_->round == round) || room)) {
        if (auto taken = wait_to_take_place(round, deadline, counted)) return *taken;
      }
      wait_ended(round, deadline, counted);
      ++round;
      continue;
    }
    if (spare_of_ && spare_of_->round == round - 1) {
      logger->info("hot spare admitted run_id={} round={} group_rank={} node_id={}", config_.run_id, round,
                   index - 1, self_.node_id);
    }
    spare_of_.reset();

    wait_out_fence(round, closed, decided_at);
    RendezvousResult res;
    res.round = round;
    res.group_rank = index - 1;
    res.group_world_size = closed.count;
    res.rank_offset = detail::packed_workers(mine) - self_.local_world_size;
    res.world_size = closed.workers;
    const bool uniform = static_cast<std::int64_t>(closed.workers) ==
                         static_cast<std::int64_t>(closed.count) * self_.local_world_size;
    if (config_.list_nodes && uniform && closed.count > config_.list_nodes_max) {
      // A large round of one --nproc_per_node: every offset is group rank x
      // nproc, so no record is read. Whoever needs another node's (the
      // straggler watch, group rank 0's) reads that one when it needs it.
      res.nodes.resize(static_cast<std::size_t>(closed.count));
      res.nodes[static_cast<std::size_t>(res.group_rank)] = self_;
      res.nodes_listed = false;
    } else if (config_.list_nodes) {
      auto listed = store_->list(detail::nodes_prefix(prefix));
      res.nodes.resize(static_cast<std::size_t>(closed.count));
      for (const auto& kv : listed.kvs) {
        auto r = detail::node_index(kv.key, prefix);
        if (r && *r < closed.count)
          res.nodes[static_cast<std::size_t>(*r)] = detail::decode_node(kv.value, kv.key);
      }
    } else {
      res.nodes = {self_};
    }
    res.store_endpoint = config_.endpoint;
    if (access_.server) res.store_endpoint.port = access_.server->port();
    res.worker_prefix = detail::worker_prefix(config_.run_id, round);
    // Every ctl/ key of a round that closed is written after its closing
    // listing (close_listing says why): watch from there, no listing of our own.
    start_round(res, closed.listed + 1, closed.count < config_.max_nodes, closed.listed + 1);
    return res;
  }
}

DynamicHandler::Closed DynamicHandler::close_round(std::int64_t round, std::int64_t seen) {
  const std::string prefix = prefix_of(round);
  const int n = detail::packed_count(seen);
  std::string value;
  try {
    // Every counted arrival writes its record right after its add.
    if (const int gone = wait_records(prefix, n, config_.close_timeout)) {
      return parse_closed(store_->compare_set(prefix + "closed", "", left_before_close(gone, round)));
    }
    // Records of nodes that died before the close are gone by now or vanish after
    // this listing, where the members' watches (from its revision + 1) see them.
    auto listed = store_->list(detail::nodes_prefix(prefix));
    int present = 0;
    for (const auto& kv : listed.kvs) {
      auto r = detail::node_index(kv.key, prefix);
      if (r && *r < n) ++present;
    }
    if (present == n) {
      close_listing(prefix);
      value = final_decision(n, detail::packed_workers(seen), listed.revision);
    } else {
      value = left_before_close(n - present, round);
    }
  } catch (const TimeoutError&) {
    value = "abort a node joined round " + std::to_string(round) +
            " but did not write its record within close_timeout " +
            detail::seconds_text(config_.close_timeout);
  }
  // The first decision wins; everyone, this node included, follows it.
  return parse_closed(store_->compare_set(prefix + "closed", "", value));
}

int DynamicHandler::wait_records(const std::string& prefix, int n, std::chrono::milliseconds timeout) {
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) keys.push_back(detail::node_key(prefix, r));
  const auto until = saturating_add(Clock::now(), timeout);
  auto slice = kRecordCheckFirst;
  while (true) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
    try {
      store_->wait(keys, std::max(std::min(slice, left), std::chrono::milliseconds(1)));
      return 0;
    } catch (const TimeoutError&) {
      if (Clock::now() >= until) throw;
    }
    slice = std::min(slice * 2, kRecordCheckMax);
    // Each live arrival without a record yet holds a marker (written with its
    // arrival, under its lease). Fewer such markers than missing records: the
    // others died. Markers of later arrivals only delay the verdict.
    std::set<std::string> recorded;
    int present = 0;
    for (const auto& kv : store_->list(detail::nodes_prefix(prefix)).kvs) {
      if (auto r = detail::node_index(kv.key, prefix); r && *r < n) ++present;
      try {
        recorded.insert(detail::decode_node(kv.value, kv.key).node_id);
      } catch (const Error&) {
        // Not a record ddprun wrote: it holds no marker back.
      }
    }
    const std::string dir = store::keys::joining_prefix(prefix);
    int waiting = 0;
    for (const auto& kv : store_->list(dir).kvs) {
      if (!recorded.count(kv.key.substr(dir.size()))) ++waiting;
    }
    if (waiting < n - present) {
      log::get("rdzv")->info(
          "{} of the first {} arrivals under {} left before writing their record run_id={}",
          n - present - waiting, n, prefix, config_.run_id);
      return n - present - waiting;
    }
  }
}

bool DynamicHandler::try_close_early(std::int64_t round, const detail::PreviousRound& prev,
                                     std::chrono::milliseconds records_wait) {
  auto logger = log::get("rdzv");
  const std::string prefix = prefix_of(round);
  const std::string old = prefix_of(prev.round);
  // Nodes that waited while the previous round ran are newcomers, unless they
  // were its hot spares: the last call exists for newcomers (and for any others
  // about to come); spares are already here.
  const auto spares = live_spares(old);
  if (!spares) {
    logger->info("newcomers waited in round {}: round {} closes after the last call run_id={}", prev.round,
                 round, config_.run_id);
    return false;
  }
  const std::int64_t seen = arrivals_->arrived(prefix);
  const int n = detail::packed_count(seen);
  if (n < config_.min_nodes || n >= config_.max_nodes) return false;  // the MAX-th arrival closes it
  try {
    // Each counted arrival writes its record next.
    if (const int gone = wait_records(prefix, n, records_wait)) {
      store_->compare_set(prefix + "closed", "", left_before_close(gone, round));
      return true;
    }
  } catch (const TimeoutError&) {
    return false;  // the last call's close_round aborts the round
  }
  const auto now = store_->list(detail::nodes_prefix(prefix));
  const auto ids = member_ids(now.kvs, prefix, n);
  // The previous round's records share their nodes' leases: those present are
  // the members still alive, whether or not they are back yet.
  auto alive = member_ids(store_->list(detail::nodes_prefix(old)).kvs, old, prev.members);
  alive.insert(spares->begin(), spares->end());
  if (static_cast<int>(ids.size()) != n || ids != alive) {
    for (const auto& id : ids) {
      if (!alive.count(id)) {
        logger->info("node {} is new since round {}: round {} closes after the last call run_id={}", id,
                     prev.round, round, config_.run_id);
        break;
      }
    }
    return false;  // a member still on its way arrives and checks again
  }
  close_listing(prefix);
  const std::string value = final_decision(n, detail::packed_workers(seen), now.revision);
  if (store_->compare_set(prefix + "closed", "", value) == value) {
    if (spares->empty()) {
      logger->info("every live member of round {} rejoined: round {} closed at once run_id={} nodes={}",
                   prev.round, round, config_.run_id, n);
    } else {
      logger->info(
          "every live member and hot spare of round {} is in: round {} closed at once run_id={} nodes={} "
          "spares={}",
          prev.round, round, config_.run_id, n, spares->size());
    }
  }
  return true;
}

std::optional<std::set<std::string>> DynamicHandler::live_spares(const std::string& old_prefix) {
  std::set<std::string> out;
  const auto waiting = store::keys::counter_value(store_->try_get(old_prefix + "ctl/waiting"));
  if (waiting == 0) return out;
  const std::string dir = store::keys::spares_prefix(old_prefix);
  for (const auto& kv : store_->list(dir).kvs) out.insert(kv.key.substr(dir.size()));
  // More waited than are spares still alive: a newcomer (or a spare that died:
  // the last call then decides, as it would for a newcomer).
  if (waiting > static_cast<std::int64_t>(out.size())) return std::nullopt;
  return out;
}

void DynamicHandler::register_spare(std::int64_t round, const Closed& closed) {
  const std::string prefix = prefix_of(round);
  // The job's nodes all run one --nproc_per_node: a spare that runs another
  // would change the world size when it takes a member's place.
  std::set<int> nprocs;
  for (const auto& kv : store_->list(detail::nodes_prefix(prefix)).kvs) {
    auto r = detail::node_index(kv.key, prefix);
    if (r && *r < config_.max_nodes) nprocs.insert(detail::decode_node(kv.value, kv.key).local_world_size);
  }
  if (nprocs.size() == 1 && *nprocs.begin() != self_.local_world_size) {
    throw ConfigError("--nproc_per_node: this node runs " + std::to_string(self_.local_world_size) +
                      " workers but the nodes of run_id=" + config_.run_id + " run " +
                      std::to_string(*nprocs.begin()) +
                      "; a hot spare must run as many to take a node's place: not admitted");
  }
  store_->set(store::keys::spare_key(prefix, self_.node_id), detail::encode_node(self_), monitor_->lease());
  spare_of_ = detail::PreviousRound{round, closed.count > 0 ? closed.count : config_.max_nodes};
  log::get("rdzv")->info(
      "hot spare: round {} runs with the maximum of {} nodes; waiting to take the place of one that fails "
      "run_id={} node_id={}",
      round, config_.max_nodes, config_.run_id, self_.node_id);
  if (config_.on_spare) config_.on_spare(round);
}

void DynamicHandler::close_listing(const std::string& prefix) {
  // The members watch ctl/ from the closing listing's revision + 1, and every
  // control key but one is written after the close: failures and "ended" by
  // members of the running round, "waiting" by nodes that found it closed.
  // The exception is a node that arrived past MAX before the listing and
  // counted itself waiting at once: write its count again, after the listing,
  // so that the members see it (a scale-up) as if it came later.
  const std::string key = prefix + "ctl/waiting";
  if (store::keys::counter_value(store_->try_get(key)) > 0) {
    store_->add(key, 0);
  }
}

DynamicHandler::Closed DynamicHandler::arrive_and_wait(std::int64_t round, std::int64_t mine,
                                                       store::BatchOp record, const Deadline& deadline) {
  const int index = detail::packed_count(mine);
  // This node's record goes out with the first wait for the close (one write),
  // unless this thread checks the round's records before that wait.
  bool sent = false;
  auto send_record = [&] {
    if (!std::exchange(sent, true)) store_->set(record.key, record.value, record.lease);
  };
  const bool closes = index == config_.max_nodes;
  const bool after_spare =
      !closes && spare_of_ && spare_of_->round == round - 1 && index >= config_.min_nodes;
  if (closes || after_spare) send_record();
  log::get("rdzv")->info("joined round run_id={} round={} arrival={} node_id={}", config_.run_id, round,
                         index, self_.node_id);
  if (closes) return close_round(round, mine);
  // Rejoining after a round this node was a member of: the round may close
  // as soon as every member still alive is back (no last call for them).
  // A hot spare of the round before: the last arrival may be the spare.
  if (after_spare) {
    try_close_early(round, *spare_of_, config_.close_timeout);
  } else if (rejoin_ && index >= config_.min_nodes) {
    const detail::PreviousRound prev = rejoin_->previous();
    // The check may run before this node's record went out: it waits for it.
    rejoin_->arm([this, round, index, prev](int live) {
      // Only the latest arrival can be the last one back (spares come
      // after the live members, so that one's index may exceed `live`).
      if (index >= live && detail::packed_count(arrivals_->arrived(prefix_of(round))) == index) {
        // Short: the joining thread waits for this call once its round closed.
        try_close_early(round, prev, std::min(config_.close_timeout, kDepartureCheckWait));
      }
    });
    if (index >= rejoin_->live()) {
      send_record();
      try_close_early(round, prev, config_.close_timeout);
    }
  }
  Closed closed;
  try {
    closed = wait_closed(round, index, deadline, sent ? nullptr : &record);
  } catch (...) {
    if (rejoin_) rejoin_->arm(nullptr);  // no check of this round after we gave up on it
    throw;
  }
  if (rejoin_) rejoin_->arm(nullptr);
  return closed;
}

DynamicHandler::Closed DynamicHandler::wait_closed(std::int64_t round, int index, const Deadline& deadline,
                                                   store::BatchOp* record) {
  const std::string key = prefix_of(round) + "closed";
  const bool candidate = index >= config_.min_nodes;
  auto last_call =
      candidate ? saturating_add(Clock::now(), config_.last_call_timeout) : Clock::time_point::max();
  int seen = index;
  const bool feedback = log::get("rdzv")->should_log(spdlog::level::info);
  while (true) {
    auto until = std::min(deadline.at(), last_call);
    if (feedback) until = std::min(until, Clock::now() + kProgressPeriod);
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    try {
      wait = std::max(wait, std::chrono::milliseconds(1));
      if (record == nullptr) return parse_closed(store_->get(key, wait));
      std::vector<store::BatchOp> ops;
      ops.push_back(std::move(*std::exchange(record, nullptr)));
      ops.back().quiet = true;  // the close's answer (or its timeout) says the record is in
      ops.push_back(store::BatchOp::get(key, wait));
      store_->batch(ops);
      store::rethrow_first_error(ops);
      return parse_closed(ops[1].result);
    } catch (const TimeoutError&) {
    }
    if (Clock::now() >= last_call) {
      // torchrun's rule: the round closes last_call_timeout after the last arrival
      // once MIN are in. Later arrivals carry their own timer, so defer to them.
      const std::int64_t now_seen = arrivals_->arrived(prefix_of(round));
      const int count = detail::packed_count(now_seen);
      if (count >= config_.max_nodes) {
        last_call = Clock::time_point::max();  // the MAX-th arrival closes it
      } else if (count > seen) {
        seen = count;
        last_call = saturating_add(Clock::now(), config_.last_call_timeout);
      } else {
        logger_info_last_call(config_, round, count);
        return close_round(round, now_seen);
      }
    }
    if (deadline.expired()) throw_timeout(round, false);
    if (feedback) log_progress(round, deadline);
  }
}

store::WatchSpec DynamicHandler::RoundWatch::spec(const std::shared_ptr<RoundWatch>& w, std::string prefix,
                                                  store::Revision from) {
  auto push = [w](const store::WatchEvent& ev) {
    {
      std::lock_guard<std::mutex> lock(w->mu);
      w->events.push_back(ev);
    }
    w->cv.notify_all();
  };
  auto fail = [w](const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(w->mu);
      w->error = why;
    }
    w->cv.notify_all();
  };
  return store::WatchSpec{std::move(prefix), from, std::move(push), std::move(fail)};
}

std::deque<store::WatchEvent> DynamicHandler::RoundWatch::take(Clock::time_point until, std::int64_t round) {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait_until(lock, until, [&] { return !events.empty() || error; });
  if (error) throw RendezvousError("watch of round " + std::to_string(round) + " ended: " + *error);
  return std::exchange(events, {});
}

void DynamicHandler::wait_ended(std::int64_t round, const Deadline& deadline, bool counted) {
  const std::string prefix = prefix_of(round);
  if (!counted) {
    const auto waiting = store_->add(prefix + "ctl/waiting", 1);
    log::get("rdzv")->info(
        "round is running, waiting to join the next one run_id={} round={} waiting_nodes={}", config_.run_id,
        round, waiting);
  }
  // The round ends (ctl/ended), or the job finishes in it (done): watched from
  // the reading of done, and ctl/ended read once for what came before.
  auto w = std::make_shared<RoundWatch>();
  const auto now = store_->list(prefix + "done");
  if (!now.kvs.empty()) throw_finished(round, true);
  const std::string nodes = detail::nodes_prefix(prefix);
  std::vector<store::WatchSpec> specs;
  specs.push_back(RoundWatch::spec(w, prefix + "ctl/ended", now.revision + 1));
  specs.push_back(RoundWatch::spec(w, prefix + "done", now.revision + 1));
  specs.push_back(RoundWatch::spec(w, nodes, now.revision + 1));
  auto handles = store_->watch_all(std::move(specs));
  if (store_->try_get(prefix + "ctl/ended") || end_if_deserted(round)) return;
  const bool feedback = log::get("rdzv")->should_log(spdlog::level::info);
  while (true) {
    for (const auto& ev : w->take(std::min(deadline.at(), Clock::now() + kProgressPeriod), round)) {
      if (ev.key == prefix + "ctl/ended") return;
      if (ev.key == prefix + "done" && ev.type == store::EventType::kPut) throw_finished(round, true);
      if (ev.type == store::EventType::kDelete && ev.key.starts_with(nodes) && end_if_deserted(round)) return;
    }
    if (deadline.expired()) throw_timeout(round, true);
    if (feedback && config_.on_progress &&
        config_.on_progress("ddprun: waiting for round " + std::to_string(round) +
                            " to end to join the next; " + detail::seconds_text(deadline.remaining()) +
                            " left")) {
      continue;
    }
    if (feedback && Clock::now() - last_progress_ >= config_.progress_interval) {
      last_progress_ = Clock::now();
      log::get("rdzv")->info("waiting for round {} to end run_id={} time_left={}", round, config_.run_id,
                             detail::seconds_text(deadline.remaining()));
    }
  }
}

bool DynamicHandler::end_if_deserted(std::int64_t round) {
  const std::string prefix = prefix_of(round);
  if (!store_->list(detail::nodes_prefix(prefix)).kvs.empty()) return false;
  if (store_->try_get(prefix + "done")) throw_finished(round, true);
  const std::string why = "every member of round " + std::to_string(round) + " left it";
  log::get("rdzv")->info("{}: ending it to join the next one run_id={}", why, config_.run_id);
  store_->compare_set(prefix + "ctl/ended", "", detail::encode_event(RoundEvent::kMembershipChanged, why));
  advance_pointer(round);
  return true;
}

void DynamicHandler::throw_finished(std::int64_t round, bool waited) {
  const std::string how = "every node of round " + std::to_string(round) + " succeeded";
  if (!waited) throw_closed("the job finished before this node joined (" + how + ")");
  throw JobFinished("run_id=" + config_.run_id + " finished while this node waited " +
                    (spare_of_ && spare_of_->round == round ? "as a hot spare" : "to join it") + " (" + how +
                    "): nothing left to run");
}

void DynamicHandler::log_progress(std::int64_t round, const Deadline& deadline) {
  const bool live = static_cast<bool>(config_.on_progress);
  if (!live && last_progress_ != Clock::time_point{} &&
      Clock::now() - last_progress_ < config_.progress_interval)
    return;
  const std::string prefix = prefix_of(round);
  const int count = detail::packed_count(arrivals_->arrived(prefix));
  std::string names = std::to_string(count) + " node(s)";
  if (count <= kNamesShown) names = name_list(store_->list(detail::nodes_prefix(prefix)).kvs, prefix, count);
  const int needed = std::max(0, config_.min_nodes - count);
  // The names come last: a narrow terminal cuts them, not the counts.
  if (live &&
      config_.on_progress("ddprun: waiting for nodes: " + std::to_string(count) + " joined, " +
                          std::to_string(needed) + " more needed (max " + std::to_string(config_.max_nodes) +
                          "), " + detail::seconds_text(deadline.remaining()) + " left [" + names + "]")) {
    return;
  }
  if (last_progress_ != Clock::time_point{} && Clock::now() - last_progress_ < config_.progress_interval)
    return;
  last_progress_ = Clock::now();
  log::get("rdzv")->info("waiting for nodes run_id={} round={} joined={} [{}] needed={} max={} time_left={}",
                         config_.run_id, round, count, names, needed, config_.max_nodes,
                         detail::seconds_text(deadline.remaining()));
}

void DynamicHandler::throw_timeout(std::int64_t round, bool late) {
  const std::string prefix = prefix_of(round);
  const int count = detail::packed_count(arrivals_->arrived(prefix));
  const auto listed = store_->list(detail::nodes_prefix(prefix));
  const std::string names = name_list(listed.kvs, prefix, std::min(count, config_.max_nodes));
  const std::string head = "rendezvous timed out after " + detail::seconds_text(config_.join_timeout) +
                           " (run_id=" + config_.run_id + ", round " + std::to_string(round) + ", store " +
                           config_.endpoint.to_string() + "): ";
  if (late) {
    throw RendezvousError(head + "round " + std::to_string(round) + " is running with " + names +
                          " and did not end to let this node in (max " + std::to_string(config_.max_nodes) +
                          " nodes)");
  }
  const int joined = std::min(count, config_.max_nodes);
  if (joined >= config_.min_nodes) {
    throw RendezvousError(head + std::to_string(joined) + " node(s) joined: " + names +
                          "; the round did not close within the join timeout (last_call_timeout " +
                          detail::seconds_text(config_.last_call_timeout) + ")");
  }
  const int needed = std::max(1, config_.min_nodes - joined);
  throw RendezvousError(head + std::to_string(joined) + " node(s) joined: " + names + "; " +
                        std::to_string(needed) +
                        " more needed for --nnodes=" + std::to_string(config_.min_nodes) + ":" +
                        std::to_string(config_.max_nodes) + "; start more agents or lower MIN");
}

}  // namespace ddp::rdzv
