// A lost node under --on_failure=reform (docs/reform.md, "A lost node"): the
// members of a running round learn of a departure (RoundMonitor's departure
// callback), wait out the fence, offer the place to the hot spares
// (P/offer/<group rank>/<revision>) and settle it once for the whole job under
// P/take/<group rank>/<revision>: a waiting hot spare claims it and joins the
// running round in the departed member's group rank, or a member gives it up
// (the job goes on smaller) or ends the round (every node rejoins).
#include <map>
#include <thread>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "dynamic_handler.hpp"
#include "keys.hpp"

namespace ddp::rdzv {

namespace {

// How long a member that offered a departed member's place gives the hot
// spares to claim it before deciding without them (a spare claims within a
// round trip of the offer).
constexpr std::chrono::milliseconds kSpareClaimWait{3000};
// A spare waiting to take a place wakes this often (progress lines, the join deadline).
constexpr std::chrono::milliseconds kSparePeriod{1000};

Place parse_place(const std::string& value, const std::string& mine) {
  Place p;
  const auto sp = value.find(' ');
  const std::string kind = value.substr(0, sp);
  p.by = sp == std::string::npos ? "" : value.substr(sp + 1);
  p.kind = kind == "spare"    ? Place::Kind::kSpare
           : kind == "shrink" ? Place::Kind::kShrink
                              : Place::Kind::kRestart;
  p.mine = value == mine;
  return p;
}

void sleep_out(const std::function<Clock::time_point()>& until) {
  for (auto t = until(); t > Clock::now(); t = std::max(t, until())) std::this_thread::sleep_until(t);
}

}  // namespace

void RendezvousHandler::set_departure_callback(DepartureCallback /*cb*/) {}

void RendezvousHandler::set_newcomer_callback(std::function<void(std::int64_t, const std::string&)> /*cb*/) {}

void RendezvousHandler::admit_newcomers(std::int64_t /*round*/, bool /*admit*/,
                                        const std::string& /*detail*/) {}

Place RendezvousHandler::settle_place(const Departure& /*d*/, bool /*offer*/, bool /*may_shrink*/) {
  return Place{};
}

namespace detail {

void StoreHandler::set_departure_callback(DepartureCallback cb) {
  monitor_->set_departure_callback(std::move(cb));
}

Place StoreHandler::settle_place(const Departure& d, bool offer, bool may_shrink) {
  const std::string prefix = prefix_of(d.round);
  const std::string key = store::keys::take_key(prefix, d.group_rank, d.revision);
  // Were the departed node only cut off, its workers are dead by the end of the fence.
  sleep_out([this] { return monitor_->fence_until(); });
  std::optional<std::string> value;
  if (offer && !store_->list(store::keys::spares_prefix(prefix)).kvs.empty()) {
    store_->set(store::keys::offer_key(prefix, d.group_rank, d.revision),
                encode_offer(d.node, d.rank_offset));
    try {
      value = store_->get(key, kSpareClaimWait);
    } catch (const TimeoutError&) {
      log::get("rdzv")->warn(
          "no hot spare claimed the place of group rank {} within {}: deciding without one", d.group_rank,
          seconds_text(kSpareClaimWait));
    }
  }
  const std::string mine = (may_shrink ? "shrink " : "restart ") + self_.node_id;
  if (!value) value = store_->compare_set(key, "", mine);
  const Place place = parse_place(*value, mine);
  if (place.mine && place.kind == Place::Kind::kShrink) {
    // Its record goes with the departed node's lease: a node that comes later
    // learns from ctl/gone/ how many ranks the place held (RoundMonitor).
    if (!d.node.node_id.empty())
      store_->set(store::keys::gone_key(prefix, d.group_rank), encode_node(d.node));
    // The place given up counts among the finished, so that the job's success
    // needs only the members left.
    if (store_->add(prefix + "succeeded", 1) >= members_to_succeed(prefix)) store_->set(prefix + "done", "1");
  }
  if (place.mine && place.kind == Place::Kind::kRestart) {
    store_->compare_set(prefix + "ctl/ended", "", encode_event(RoundEvent::kMembershipChanged, d.detail));
  }
  return place;
}

void StoreHandler::set_newcomer_callback(std::function<void(std::int64_t, const std::string&)> cb) {
  monitor_->set_newcomer_callback(std::move(cb));
}

void StoreHandler::admit_newcomers(std::int64_t round, bool admit, const std::string& detail) {
  const std::string prefix = prefix_of(round);
  if (admit) {
    store_->set(store::keys::grow_ok_key(prefix), "1");
  } else {
    store_->compare_set(prefix + "ctl/ended", "", encode_event(RoundEvent::kNodesWaiting, detail));
  }
}

}  // namespace detail

std::optional<RendezvousResult> DynamicHandler::wait_to_take_place(std::int64_t round,
                                                                   const Deadline& deadline, bool& counted) {
  const std::string prefix = prefix_of(round);
  const Closed closed = parse_closed(store_->get(prefix + "closed", deadline.remaining()));
  if (closed.kind != Closed::Kind::kFinal) return std::nullopt;
  // A hot spare takes a lost member's place; a newcomer to a round with room
  // grows it, once the members admit newcomers.
  bool spare = spare_of_ && spare_of_->round == round;
  // A newcomer's ranks follow every rank the round has had (grow_into). A
  // spare takes only a place of as many workers as it runs (claim_offer).
  // Counted as wait_ended counts a late joiner: the members see a newcomer,
  // and the next round's early close tells spares from newcomers by it.
  const auto waiting = store_->add(prefix + "ctl/waiting", 1);
  counted = true;
  log::get("rdzv")->info("{} beside running round {} run_id={} waiting_nodes={}",
                         spare ? "hot spare, taking the place of a member that leaves,"
                               : "newcomer, growing the round once its members admit it,",
                         round, config_.run_id, waiting);
  // The places given up when this node last found no room to grow the round:
  // one given up since (its job went on without a lost node) makes room again.
  int gone_seen = 0;
  const std::string gone = store::keys::gone_prefix(prefix);
  while (true) {
    auto w = std::make_shared<RoundWatch>();
    // What is written from now on is watched; what was written before is read below.
    const std::string watched = spare ? store::keys::offers_prefix(prefix) : store::keys::grow_ok_key(prefix);
    const auto now = store_->list(watched);
    std::vector<store::WatchSpec> specs;
    specs.push_back(RoundWatch::spec(w, watched, now.revision + 1));
    specs.push_back(RoundWatch::spec(w, prefix + "ctl/ended", now.revision + 1));
    specs.push_back(RoundWatch::spec(w, prefix + "done", now.revision + 1));
    const std::string nodes = detail::nodes_prefix(prefix);
    specs.push_back(RoundWatch::spec(w, nodes, now.revision + 1));
    bool regrow = false;
    if (spare) {
      const auto given_up = store_->list(gone);
      regrow = static_cast<int>(given_up.kvs.size()) > gone_seen;
      specs.push_back(RoundWatch::spec(w, gone, given_up.revision + 1));
    }
    auto handles = store_->watch_all(std::move(specs));
    // What came before the watches: the job finished (the members' last
    // success may land after the late check), or the round ended or emptied.
    const auto before = store_->multi_get({prefix + "done", prefix + "ctl/ended"});
    if (before[0]) throw_finished(round, true);
    if (before[1] || end_if_deserted(round)) return std::nullopt;
    std::deque<store::WatchEvent> events;
    for (const auto& kv : now.kvs)
      events.push_back(store::WatchEvent{store::EventType::kPut, kv.key, kv.value, kv.revision});
    bool full = false;
    while (!full && !regrow) {
      for (const auto& ev : events) {
        if (ev.key == prefix + "ctl/ended") return std::nullopt;  // the round ended: join the next one
        if (ev.key == prefix + "done" && ev.type == store::EventType::kPut) throw_finished(round, true);
        if (ev.key.starts_with(nodes)) {  // a member's record: only its end matters here
          if (ev.type == store::EventType::kDelete && end_if_deserted(round)) return std::nullopt;
          continue;
        }
        if (ev.type != store::EventType::kPut) continue;
        if (spare && ev.key.compare(0, gone.size(), gone) == 0) {
          regrow = true;
          break;
        }
        if (!spare) {
          if (auto g = claim_new_rank(prefix, closed, gone_seen))
            return grow_into(round, closed, *g, gone_seen);
          full = true;  // every place up to MAX is taken: a hot spare from now on
          break;
        }
        if (auto taken = claim_offer(round, closed, ev)) return taken;
      }
      if (full || regrow) break;
      events.clear();
      if (deadline.expired()) throw_timeout(round, true);
      if (Clock::now() - last_progress_ >= config_.progress_interval) {
        last_progress_ = Clock::now();
        log::get("rdzv")->info("waiting beside round {} run_id={} time_left={}", round, config_.run_id,
                               detail::seconds_text(deadline.remaining()));
      }
      events = w->take(std::min(deadline.at(), Clock::now() + kSparePeriod), round);
    }
    if (regrow) {
      // No spare took a lost member's place and the job went on without it:
      // room below MAX again, which this node grows into once admitted.
      store_->remove(store::keys::spare_key(prefix, self_.node_id));
      spare_of_.reset();
      spare = false;
      log::get("rdzv")->info(
          "running round {} gave a lost node's place up: growing it instead of waiting as a hot spare "
          "run_id={}",
          round, config_.run_id);
      continue;
    }
    register_spare(round, closed);
    spare = true;
  }
}

std::optional<RendezvousResult> DynamicHandler::claim_offer(std::int64_t round, const Closed& closed,
                                                            const store::WatchEvent& ev) {
  // "offer/<group rank>/<revision>": claimed by the first spare to answer.
  const std::string prefix = prefix_of(round);
  const std::string rel = ev.key.substr(store::keys::offers_prefix(prefix).size());
  const auto slash = rel.find('/');
  const auto rank = store::keys::index_or_none(std::string_view(rel).substr(0, slash));
  const auto rev =
      slash == std::string::npos ? -1 : store::keys::index_or_none(std::string_view(rel).substr(slash + 1));
  if (rank < 0 || rank >= config_.max_nodes || rev < 0) return std::nullopt;
  detail::Offer offer;
  try {
    offer = detail::decode_offer(ev.value, ev.key);
  } catch (const Error&) {
  }
  const int offset = place_offset(closed, static_cast<int>(rank), offer);
  if (offset < 0) return std::nullopt;
  const std::string mine = "spare " + self_.node_id;
  if (store_->compare_set(store::keys::take_key(prefix, rank, rev), "", mine) != mine) return std::nullopt;
  return take_place(round, closed, static_cast<int>(rank), offset, offer.node);
}

int DynamicHandler::place_offset(const Closed& closed, int rank, const detail::Offer& offer) const {
  const bool known = !offer.node.node_id.empty() && offer.rank_offset >= 0;
  if (known && offer.node.local_world_size == self_.local_world_size) return offer.rank_offset;
  // An offer that does not say: only where every node runs as many workers as this one.
  if (!known && closed.workers == closed.count * self_.local_world_size) return rank * self_.local_world_size;
  log::get("rdzv")->info(
      "hot spare runs {} worker(s); the place of {} (group rank {}) runs {}: not taken, waiting for another "
      "run_id={}",
      self_.local_world_size, offer.node.node_id.empty() ? "a lost node" : "node " + offer.node.node_id, rank,
      known ? std::to_string(offer.node.local_world_size) : std::string("an unknown number"), config_.run_id);
  return -1;
}

int DynamicHandler::given_up_places(const std::string& prefix) {
  return static_cast<int>(store_->list(store::keys::gone_prefix(prefix)).kvs.size());
}

std::optional<int> DynamicHandler::claim_new_rank(const std::string& prefix, const Closed& closed,
                                                  int& given_up) {
  const std::string mine = store::keys::grow_value(self_.node_id, self_.local_world_size);
  // A place given up keeps its group rank (and its ranks): a newcomer takes a
  // new one past it, so that at most MAX places are live.
  given_up = given_up_places(prefix);
  // Claims are made in order and never removed: the first free one follows
  // those listed (a claim made since fails its compare_set and moves on).
  // One listing instead of a compare_set per earlier grow.
  const auto claimed = static_cast<int>(store_->list(store::keys::grow_prefix(prefix)).kvs.size());
  for (int g = closed.count + claimed; g < config_.max_nodes + given_up; ++g) {
    if (store_->compare_set(store::keys::grow_key(prefix, g), "", mine) == mine) return g;
  }
  return std::nullopt;
}

RendezvousResult DynamicHandler::grow_into(std::int64_t round, const Closed& closed, int rank, int given_up) {
  const std::string prefix = prefix_of(round);
  store_->set(detail::node_key(prefix, rank), detail::encode_node(self_), monitor_->lease());
  store_->add(store::keys::grown_key(prefix), 1);
  store_->add(prefix + "ctl/waiting", -1);
  RendezvousResult res;
  res.round = round;
  res.group_rank = rank;
  res.group_world_size = rank + 1;
  // After every rank the round has had: its own (places given up since keep
  // their ranks), then those of the nodes that grew it before this one, each
  // as many as its P/grow/<g> says (claimed in order, so all are there; one
  // listing reads them all).
  res.rank_offset = closed.workers;
  if (rank > closed.count) {
    std::map<std::int64_t, int> nproc_of;
    const std::string claims = store::keys::grow_prefix(prefix);
    for (const auto& kv : store_->list(claims).kvs) {
      const auto g = store::keys::index_or_none(std::string_view(kv.key).substr(claims.size()));
      if (g >= 0) nproc_of[g] = store::keys::parse_grow_value(kv.value).second;
    }
    for (int g = closed.count; g < rank; ++g) {
      const auto it = nproc_of.find(g);
      const int nproc = it == nproc_of.end() ? -1 : it->second;
      res.rank_offset += nproc >= 0 ? nproc : self_.local_world_size;
    }
  }
  res.world_size = closed.workers;
  res.takes_place = true;
  res.grows = true;
  const auto listed = store_->list(detail::nodes_prefix(prefix));
  res.nodes.resize(static_cast<std::size_t>(rank) + 1);
  for (const auto& kv : listed.kvs) {
    if (auto r = detail::node_index(kv.key, prefix); r && *r <= rank)
      res.nodes[static_cast<std::size_t>(*r)] = detail::decode_node(kv.value, kv.key);
  }
  res.store_endpoint = config_.endpoint;
  if (access_.server) res.store_endpoint.port = access_.server->port();
  res.worker_prefix = detail::worker_prefix(config_.run_id, round);
  log::get("rdzv")->info("newcomer grows running round {} run_id={} group_rank={} ranks {}-{}", round,
                         config_.run_id, rank, res.rank_offset, res.rank_offset + self_.local_world_size - 1);
  start_round(res, listed.revision + 1, rank + 1 - given_up < config_.max_nodes);
  set_closed_members(closed.count);
  return res;
}

RendezvousResult DynamicHandler::take_place(std::int64_t round, const Closed& closed, int rank, int offset,
                                            const NodeSpec& replaced) {
  const std::string prefix = prefix_of(round);
  store_->set(detail::node_key(prefix, rank), detail::encode_node(self_), monitor_->lease());
  store_->remove(store::keys::spare_key(prefix, self_.node_id));
  store_->add(prefix + "ctl/waiting", -1);
  spare_of_.reset();
  RendezvousResult res;
  res.round = round;
  res.group_rank = rank;
  res.group_world_size = std::max(closed.count, rank + 1);  // a place a newcomer grew
  res.rank_offset = offset;
  res.world_size = closed.workers;
  res.takes_place = true;
  res.replaced = replaced;
  const auto listed = store_->list(detail::nodes_prefix(prefix));
  res.nodes.resize(static_cast<std::size_t>(res.group_world_size));
  for (const auto& kv : listed.kvs) {
    if (auto r = detail::node_index(kv.key, prefix); r && *r < res.group_world_size)
      res.nodes[static_cast<std::size_t>(*r)] = detail::decode_node(kv.value, kv.key);
  }
  res.store_endpoint = config_.endpoint;
  if (access_.server) res.store_endpoint.port = access_.server->port();
  res.worker_prefix = detail::worker_prefix(config_.run_id, round);
  log::get("rdzv")->info(
      "hot spare takes the place of {} in running round {} run_id={} group_rank={} ranks {}-{}",
      replaced.node_id.empty() ? "a lost node" : "node " + replaced.node_id, round, config_.run_id, rank,
      res.rank_offset, res.rank_offset + self_.local_world_size - 1);
  start_round(res, listed.revision + 1, closed.count < config_.max_nodes);
  set_closed_members(closed.count);
  return res;
}

}  // namespace ddp::rdzv
