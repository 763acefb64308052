// The store endpoint torch workers get as MASTER_ADDR/MASTER_PORT.
//
// torch's env:// rendezvous (TORCHELASTIC_USE_AGENT_STORE=True) puts its keys
// under "/worker/attempt_<restart count>/" of whatever store MASTER_* names,
// with no job and no round in them. So the agent serves its own workers a
// TCPStore endpoint on loopback, bound here before any rendezvous (no port
// race: nobody else can take it between choosing and using it), and forwards
// every request to the round's store under the round's worker_prefix,
// "/<run_id>/worker/round_<k>/": jobs sharing a daemon never meet, and a new
// round (restart or scale change) never reads an old round's keys. Each node
// serves only its own workers, so no node depends on another's agent for this.
// Each local rank is a lane of its own (found by its LOCAL_RANK), so that a
// rank which destroys and re-creates its process group is seen to start
// again (torch_proxy.hpp).
// docs/rendezvous.md, "Torch workers' store", has the why and the cost.
#include "agent_impl.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::agent {

namespace {

constexpr const char* kLoopback = "127.0.0.1";

}  // namespace

void Agent::Impl::start_torch_store() {
  store::TorchProxyOptions options;
  options.host = kLoopback;
  // A lane per local rank: a rank that re-inits its process group gets fresh keys.
  options.lane_env = "LOCAL_RANK";
  options.torch_legacy_protocol = cfg.rendezvous.torch_legacy_protocol;
  // A store restarting under systemd comes back within the keep-alive window.
  options.connect_timeout = rdzv::keep_alive_window(cfg.rendezvous);
  torch_store = std::make_unique<store::TorchStoreProxy>(options);
  torch_store->start();
}

void Agent::Impl::point_torch_store(const rdzv::RendezvousResult& r) {
  if (!torch_store) return;
  torch_store->set_target({r.store_endpoint, cfg.rendezvous.token, r.worker_prefix});
  log->debug("torch workers' store port={} forwards to store={} prefix={}", torch_store->port(),
             r.store_endpoint.to_string(), r.worker_prefix);
}

Endpoint Agent::Impl::torch_store_endpoint() const {
  if (!torch_store) return {};
  return {kLoopback, torch_store->port()};
}

}  // namespace ddp::agent
