// torchrun's legacy multi-node mode: --nnodes=N --node_rank=R --master_addr
// --master_port. Node 0 hosts the store on master_port; the others connect.
#pragma once

#include "store_handler.hpp"

namespace ddp::rdzv {

// Round k: every node writes its record under its node rank and waits for all N;
// group rank = node rank, rank offsets follow every node's local_world_size.
// A failure (or a dead node) ends the round for all; they meet again in round k+1.
class StaticHandler final : public detail::StoreHandler {
 public:
  StaticHandler(const RendezvousConfig& config, const NodeSpec& self);
  StaticHandler(const RendezvousConfig& config, const NodeSpec& self, detail::StoreAccess access);

  std::string backend() const override { return "static"; }
  RendezvousResult next_rendezvous() override;

 private:
  // ConfigError (after closing the job for the others) when an earlier node of
  // `round` was started with another --nnodes.
  void check_same_node_count(std::int64_t round);
  [[noreturn]] void throw_timeout(std::int64_t round, const std::vector<std::optional<std::string>>& recs);
};

}  // namespace ddp::rdzv
