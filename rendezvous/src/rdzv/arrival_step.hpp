// The first step of joining a c10d-style round: a joiner learns its arrival
// index (1-based, its group rank + 1) and the sum of local_world_size over the
// arrivals up to and including it (its rank offset + its own workers). Values
// are packed as in keys.hpp: (count << 32) | workers. Private to ddp_rdzv.
//
// Two implementations (docs/rendezvous.md has both):
//   counter  one atomic add on P/seq. The built-in store serves it in memory,
//            so it is one request per agent.
//   etcd     each joiner creates its own key P/arrive/<nproc>/<node_id>.<nonce>
//            and counts the arrival keys at its own create revision.
//            No key is written by two joiners, so etcd never rejects a write
//            and batches concurrent ones; a shared counter would cost a
//            compare-and-swap retry loop per joiner (O(N^2) txns per round).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddp/rdzv/rendezvous.hpp"
#include "ddp/store/store.hpp"

namespace ddp::store {
class EtcdStore;
}

namespace ddp::rdzv::detail {

// Thread-safety: as the store it uses.
class ArrivalStep {
 public:
  virtual ~ArrivalStep() = default;
  // Registers `self` as an arrival of the round with prefix `prefix` (ends with
  // '/'); returns the packed (index, workers up to and including self). Called
  // once per node and round. `before` are requests to apply first, sent in the
  // same round trip where the store allows it (StoreHandler::round_to_join's);
  // the first error among them and the arrival is thrown. With a `lease` (not
  // 0) the same request writes P/joining/<node_id> under it (job_keys.hpp), so
  // that the arrival's death before its record shows.
  virtual std::int64_t arrive(const std::string& prefix, const NodeSpec& self, store::LeaseId lease,
                              std::vector<store::BatchOp> before = {}) = 0;
  // The packed (arrivals so far, their workers), from one consistent snapshot;
  // 0 before anyone arrived.
  virtual std::int64_t arrived(const std::string& prefix) = 0;
};

std::unique_ptr<ArrivalStep> counter_arrivals(std::shared_ptr<store::Store> store);
// `local_world_size` is this node's: the common case (every node runs as many
// workers) is then answered by counts alone.
std::unique_ptr<ArrivalStep> etcd_arrivals(std::shared_ptr<store::EtcdStore> etcd, int local_world_size);

}  // namespace ddp::rdzv::detail
