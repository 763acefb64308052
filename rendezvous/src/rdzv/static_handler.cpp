#include "static_handler.hpp"

#include "ddp/common/deadline.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/common/parse.hpp"

namespace ddp::rdzv {

namespace {

using Clock = std::chrono::steady_clock;
// How often a waiting node checks for a closed job; it logs progress every
// config_.progress_interval.
constexpr std::chrono::milliseconds kProgressPeriod{1000};

const RendezvousConfig& checked(const RendezvousConfig& c) {
  detail::validate_run_id(c.run_id);
  if (c.min_nodes != c.max_nodes) {
    throw ConfigError("--nnodes: static rendezvous needs a fixed node count, got " +
                      std::to_string(c.min_nodes) + ":" + std::to_string(c.max_nodes) +
                      "; use --rdzv_backend=c10d for an elastic MIN:MAX");
  }
  if (c.max_nodes < 1) throw ConfigError("--nnodes: must be at least 1");
  if (c.node_rank < 0 || c.node_rank >= c.max_nodes) {
    throw ConfigError("--node_rank: " + std::to_string(c.node_rank) + " is outside 0.." +
                      std::to_string(c.max_nodes - 1) + " for --nnodes=" + std::to_string(c.max_nodes));
  }
  if (c.endpoint.host.empty()) throw ConfigError("--master_addr: must be set for static rendezvous");
  if (c.endpoint.port == 0 && c.max_nodes > 1) {
    throw ConfigError("--master_port: must be a fixed port that every node knows, not 0");
  }
  return c;
}

}  // namespace

StaticHandler::StaticHandler(const RendezvousConfig& config, const NodeSpec& self)
    : StoreHandler(
          checked(config), self,
          detail::open_store(config,
                             config.is_host.value_or(config.node_rank == 0) ? detail::HostMode::kAlways
                                                                            : detail::HostMode::kNever,
                             config.handed_store ? config.handed_store->flag : "--master_addr/--master_port",
                             config.handed_store ? detail::Unreachable::kConfigError
                                                 : detail::Unreachable::kRendezvousError)) {}

StaticHandler::StaticHandler(const RendezvousConfig& config, const NodeSpec& self, detail::StoreAccess access)
    : StoreHandler(checked(config), self, std::move(access)) {}

RendezvousResult StaticHandler::next_rendezvous() {
  auto logger = log::get("rdzv");
  const auto deadline = Deadline::after(config_.join_timeout);
  const int n = config_.max_nodes;
  const std::int64_t round = round_to_join();
  const std::string prefix = prefix_of(round);
  check_same_node_count(round);
  store_->set(detail::node_key(prefix, config_.node_rank), detail::encode_node(self_), monitor_->lease());

  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back(detail::node_key(prefix, r));
  bool logged = false;
  Clock::time_point last_logged;
  while (true) {
    try {
      store_->wait(keys, std::min(kProgressPeriod, deadline.remaining()));
    } catch (const TimeoutError&) {
      auto probe = keys;
      probe.push_back(prefix + "closed");
      auto recs = store_->multi_get(probe);
      if (recs.back() && recs.back()->rfind("closed ", 0) == 0) throw_closed(recs.back()->substr(7));
      recs.pop_back();
      if (deadline.expired()) throw_timeout(round, recs);
      int present = 0;
      for (const auto& r : recs) present += r ? 1 : 0;
      if (config_.on_progress && config_.on_progress("ddprun: waiting for nodes: " + std::to_string(present) +
                                                     " of " + std::to_string(n) + " joined; " +
                                                     detail::seconds_text(deadline.remaining()) + " left")) {
        continue;
      }
      if (logged && Clock::now() - last_logged < config_.progress_interval) continue;
      logged = true;
      last_logged = Clock::now();
      logger->info("waiting for nodes run_id={} round={} joined={}/{} time_left={}", config_.run_id, round,
                   present, n, detail::seconds_text(deadline.remaining()));
      continue;
    }
    // A record can vanish between the wait and the list (a node died): wait again.
    auto listed = store_->list(detail::nodes_prefix(prefix));
    std::vector<std::optional<NodeSpec>> by_rank(static_cast<std::size_t>(n));
    for (const auto& kv : listed.kvs) {
      auto r = detail::node_index(kv.key, prefix);
      if (r && *r < n) by_rank[static_cast<std::size_t>(*r)] = detail::decode_node(kv.value, kv.key);
    }
    bool complete = true;
    for (const auto& s : by_rank) complete = complete && s.has_value();
    if (!complete) continue;

    RendezvousResult res;
    res.round = round;
    res.group_rank = config_.node_rank;
    res.group_world_size = n;
    res.world_size = 0;
    for (int r = 0; r < n; ++r) {
      const auto& spec = *by_rank[static_cast<std::size_t>(r)];
      if (r == config_.node_rank) res.rank_offset = res.world_size;
      res.world_size += spec.local_world_size;
      res.nodes.push_back(spec);
    }
    res.store_endpoint = config_.endpoint;
    if (access_.server) res.store_endpoint.port = access_.server->port();
    res.worker_prefix = detail::worker_prefix(config_.run_id, round);
    start_round(res, listed.revision + 1, /*can_grow=*/false);
    return res;
  }
}

void StaticHandler::check_same_node_count(std::int64_t round) {
  // The first node to arrive records its --nnodes; every other compares. With
  // different counts one side would start a world the other never joins.
  const std::string mine =
      std::to_string(config_.max_nodes) + " " + std::to_string(config_.node_rank) + " " + self_.node_id;
  const std::string agreed = store_->compare_set(prefix_of(round) + "nnodes", "", mine);
  const auto space = agreed.find(' ');
  const std::string theirs = agreed.substr(0, space);
  if (theirs == std::to_string(config_.max_nodes)) return;
  const auto second = agreed.find(' ', space + 1);
  const std::string their_rank = agreed.substr(space + 1, second - space - 1);
  const std::string their_id = second == std::string::npos ? std::string("?") : agreed.substr(second + 1);
  const std::string why = "--nnodes differs between nodes: node_rank " + std::to_string(config_.node_rank) +
                          " (" + self_.node_id + ") has --nnodes=" + std::to_string(config_.max_nodes) +
                          ", node_rank " + their_rank + " (" + their_id + ") has --nnodes=" + theirs;
  // The node that recorded its count goes on to write its record: the exit
  // barrier waits for it, so that it reads why instead of a store that is gone.
  auto other = parse_int<int>(their_rank);
  if (other && (*other < 0 || *other == config_.node_rank)) other.reset();
  try {
    close_while_joining(round, why, other);
  } catch (const Error& e) {
    // The node hosting the store may stop at the first write, which ended its
    // round, before the rest is written: the mismatch is still this node's error.
    log::get("rdzv")->debug("closing run_id={} for the --nnodes mismatch: {}", config_.run_id, e.what());
  }
  throw ConfigError(why + "; give every node the same --nnodes");
}

void StaticHandler::throw_timeout(std::int64_t round, const std::vector<std::optional<std::string>>& recs) {
  std::string joined;
  std::string missing;
  int n_missing = 0;
  for (std::size_t r = 0; r < recs.size(); ++r) {
    if (recs[r]) {
      if (!joined.empty()) joined += ", ";
      joined += detail::decode_node(*recs[r], "node/" + std::to_string(r)).node_id + " (node_rank " +
                std::to_string(r) + ")";
    } else {
      if (!missing.empty()) missing += ", ";
      missing += std::to_string(r);
      ++n_missing;
    }
  }
  throw RendezvousError("static rendezvous timed out after " + detail::seconds_text(config_.join_timeout) +
                        " (run_id=" + config_.run_id + ", round " + std::to_string(round) + ", store " +
                        config_.endpoint.to_string() + "): joined: " + joined + "; " +
                        std::to_string(n_missing) + " more needed: node_rank " + missing +
                        "; start ddprun with those --node_rank values");
}

}  // namespace ddp::rdzv
