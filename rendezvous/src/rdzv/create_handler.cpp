#include "ddp/common/error.hpp"
#include "ddp/rdzv/rendezvous.hpp"
#include "standalone_handler.hpp"

namespace ddp::rdzv {

std::unique_ptr<RendezvousHandler> create_handler(const RendezvousConfig& config,
                                                  const NodeSpec& self) {
  if (self.local_world_size < 1) {
    throw ConfigError("--nproc_per_node: must be at least 1, got " +
                      std::to_string(self.local_world_size));
  }
  if (config.backend == "standalone") return std::make_unique<StandaloneHandler>(config, self);
  throw ConfigError("--rdzv_backend: unknown backend '" + config.backend +
                    "'; use standalone, static or c10d");
}

}  // namespace ddp::rdzv
