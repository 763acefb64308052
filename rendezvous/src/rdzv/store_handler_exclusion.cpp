// Bad nodes kept out (docs/rendezvous.md, "Bad nodes kept out"): a node whose
// workers failed too often writes its host under /<run>/rdzv/excluded/, where
// every later first join of that host finds it (StoreHandler::round_to_join),
// and closes the job when too few nodes are left to reach MIN.
#include <set>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "keys.hpp"
#include "store_handler.hpp"

namespace ddp::rdzv {

Exclusion RendezvousHandler::exclude_self(const std::string& /*why*/) {
  throw ConfigError("--max_node_failures: the " + backend() +
                    " rendezvous cannot exclude nodes; use --rdzv_backend=c10d or etcd");
}

namespace detail {

void StoreHandler::throw_excluded(const std::string& why) const {
  throw ExcludedError("this node (host " + self_.host + ") is excluded from run_id=" + config_.run_id + ": " +
                      why + "; an operator re-admits it with `ddp-store excluded readmit --rdzv_id " +
                      config_.run_id + " " + self_.host + "`");
}

Exclusion StoreHandler::exclude_self(const std::string& why) {
  std::optional<std::int64_t> round;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (current_) round = current_->round;
  }
  store_->set(store::keys::excluded_key(config_.run_id, self_.host), why);
  Exclusion out;
  std::set<std::string> hosts;
  const std::string dir = store::keys::excluded_prefix(config_.run_id);
  for (const auto& kv : store_->list(dir).kvs) {
    hosts.insert(kv.key.substr(dir.size()));
    out.excluded.push_back(kv.key.substr(dir.size()) + " (" + kv.value + ")");
  }
  // Who is left: the round's members still alive (their records share their
  // leases) and its spares, less every excluded host.
  if (round) {
    const std::string prefix = prefix_of(*round);
    for (const auto& d : {nodes_prefix(prefix), store::keys::spares_prefix(prefix)}) {
      for (const auto& kv : store_->list(d).kvs) {
        if (!hosts.count(decode_node(kv.value, kv.key).host)) ++out.left;
      }
    }
  }
  log::get("rdzv")->warn("excluded this node's host from the job run_id={} host={} nodes_left={} min={}",
                         config_.run_id, self_.host, out.left, config_.min_nodes);
  if (out.left < config_.min_nodes) {
    std::string names;
    for (const auto& e : out.excluded) names.append(names.empty() ? "" : ", ").append(e);
    close(std::string(kClosedByExclusion) + names + ": " + std::to_string(out.left) +
          " node(s) left, --nnodes MIN is " + std::to_string(config_.min_nodes));
    out.closed = true;
    return out;
  }
  // The others restart without this node, with a spare if one waits; the
  // report is what each of them logs.
  if (round) report_failure("host " + self_.host + " excluded from the job: " + why);
  return out;
}

}  // namespace detail
}  // namespace ddp::rdzv
