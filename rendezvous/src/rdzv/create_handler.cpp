#include <algorithm>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/common/time_bounds.hpp"
#include "ddp/rdzv/backend.hpp"
#include "ddp/rdzv/rendezvous.hpp"
#include "ddp/store/protocol.hpp"
#include "dynamic_handler.hpp"
#include "etcd_handler.hpp"
#include "keys.hpp"
#include "standalone_handler.hpp"
#include "static_handler.hpp"

namespace ddp::rdzv {

namespace {

void check_self(const NodeSpec& self) {
  if (self.local_world_size < 1) {
    throw ConfigError("--nproc_per_node: must be at least 1, got " + std::to_string(self.local_world_size));
  }
  if (self.node_id.empty()) throw InternalError("rendezvous: NodeSpec::node_id is empty");
}

Backend backend_of(const RendezvousConfig& config) {
  const auto b = parse_backend(config.backend);
  if (!b)
    throw ConfigError("--rdzv_backend: unknown backend '" + config.backend + "'; use " + backend_choices());
  return *b;
}

}  // namespace

std::chrono::milliseconds keep_alive_window(const RendezvousConfig& config) {
  return clamp_product(config.keep_alive_interval, std::max(1, config.keep_alive_max_attempt));
}

void check_keep_alive(const RendezvousConfig& config) {
  if (config.keep_alive_interval.count() <= 0) {
    throw ConfigError("--rdzv_conf: keep_alive_interval must be positive");
  }
  // With 1 the lease ends before the next keep-alive can renew it, and a node
  // would fence itself (kill its workers) every interval.
  if (config.keep_alive_max_attempt < 2) {
    throw ConfigError("--rdzv_conf: keep_alive_max_attempt must be at least 2 (with " +
                      std::to_string(config.keep_alive_max_attempt) +
                      " a node's lease ends before its next keep-alive can renew it)");
  }
  if (keep_alive_window(config).count() > store::kMaxLeaseTtlMs) {
    throw ConfigError("--rdzv_conf: keep_alive_interval=" + detail::seconds_text(config.keep_alive_interval) +
                      " x keep_alive_max_attempt=" + std::to_string(config.keep_alive_max_attempt) +
                      " is a keep-alive window longer than one year, the longest lease a store keeps; "
                      "lower either");
  }
}

std::unique_ptr<RendezvousHandler> create_handler(const RendezvousConfig& config, const NodeSpec& self) {
  check_self(self);
  check_keep_alive(config);
  const Backend backend = backend_of(config);
  if (backend == Backend::kStandalone) return std::make_unique<StandaloneHandler>(config, self);
  if (backend == Backend::kStatic) return std::make_unique<StaticHandler>(config, self);
  if (backend == Backend::kEtcd) {
    if (config.backend != backend_name(Backend::kEtcd))
      log::get("rdzv")->warn("rdzv backend {} talks to etcd's v3 API (etcd 3.6 removed v2)", config.backend);
    detail::validate_run_id(config.run_id);
    return std::make_unique<detail::EtcdHandler>(config, self);
  }
  // Backend::kC10d.
  detail::validate_run_id(config.run_id);
  if (config.endpoint.host.empty() || config.endpoint.port == 0) {
    throw ConfigError("--rdzv_endpoint: c10d rendezvous needs HOST:PORT, got '" +
                      config.endpoint.to_string() + "'");
  }
  // An endpoint nobody serves is a configuration mistake (exit 2).
  auto access = detail::open_store(config,
                                   !config.is_host   ? detail::HostMode::kIfLocal
                                   : *config.is_host ? detail::HostMode::kAlways
                                                     : detail::HostMode::kNever,
                                   "--rdzv_endpoint", detail::Unreachable::kConfigError);
  return std::make_unique<DynamicHandler>(config, self, std::move(access));
}

std::unique_ptr<RendezvousHandler> create_handler(const RendezvousConfig& config, const NodeSpec& self,
                                                  std::shared_ptr<store::Store> store) {
  check_self(self);
  check_keep_alive(config);
  detail::StoreAccess access;
  access.client = std::move(store);
  const Backend backend = backend_of(config);
  if (backend == Backend::kStatic) return std::make_unique<StaticHandler>(config, self, std::move(access));
  if (backend == Backend::kC10d) return std::make_unique<DynamicHandler>(config, self, std::move(access));
  throw ConfigError("--rdzv_backend: '" + config.backend +
                    "' cannot run over a given store; use static or c10d");
}

}  // namespace ddp::rdzv
