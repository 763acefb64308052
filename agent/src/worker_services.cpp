// The torch workers' store: torch's env:// rendezvous
// (TORCHELASTIC_USE_AGENT_STORE=True) puts its keys under
// "/worker/attempt_<restart count>/" of whatever store MASTER_* names, with no
// job and no round in them. So the agent serves its own workers a TCPStore
// endpoint on loopback, bound here before any rendezvous (no port race: nobody
// else can take it between choosing and using it), and forwards every request
// to the round's store under the round's worker_prefix,
// "/<run_id>/worker/round_<k>/": jobs sharing a daemon never meet, and a new
// round (restart or scale change) never reads an old round's keys. Each node
// serves only its own workers, so no node depends on another's agent for this.
// Each local rank is a lane of its own (found by its LOCAL_RANK), so that a
// rank which destroys and re-creates its process group is seen to start
// again (torch_proxy.hpp).
// docs/rendezvous.md, "Torch workers' store", has the why and the cost.
#include "worker_services.hpp"

#include "containment.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/common/parse.hpp"
#include "run_dir.hpp"

namespace ddp::agent {

namespace {

constexpr const char* kLoopback = "127.0.0.1";
constexpr const char* kEnableFileTimer = "TORCHELASTIC_ENABLE_FILE_TIMER";
constexpr const char* kTimerFile = "TORCHELASTIC_TIMER_FILE";

}  // namespace

WorkerServices::WorkerServices(boost::asio::io_context& io, const AgentConfig& cfg,
                               std::shared_ptr<spdlog::logger> log)
    : io_(io), cfg_(cfg), log_(std::move(log)) {}

WorkerServices::~WorkerServices() = default;

void WorkerServices::reap_stale_cgroups() {
  stale_cgroups_ = std::async(std::launch::async, ddp::agent::reap_stale_cgroups);
}

void WorkerServices::wait_cgroups_reaped() {
  if (stale_cgroups_.valid()) stale_cgroups_.wait();
}

void WorkerServices::cgroups_reaped() {
  if (stale_cgroups_.valid()) stale_cgroups_.get();
}

void WorkerServices::start(const std::filesystem::path& run_dir,
                           std::function<void(const TimerRequest&)> on_request) {
  base_env_ = current_environment();
  const auto enabled = base_env_.find(kEnableFileTimer);
  // torch reads only "1"; ddprun refuses what is not a boolean (launch_options.cpp).
  if (enabled != base_env_.end() && parse_bool(enabled->second).value_or(false)) {
    const auto given = base_env_.find(kTimerFile);
    std::filesystem::path path = given != base_env_.end() && !given->second.empty()
                                     ? std::filesystem::path(given->second)
                                     : run_dir / RunDir::kTimerPipe;
    file_timer_ = std::make_unique<FileTimerServer>(io_, path, std::move(on_request));
    liveness_env_[kTimerFile] = path.string();
    log_->info("serving torch FileTimer requests at {}", path.string());
  }
}

void WorkerServices::start_torch_store() {
  store::TorchProxyOptions options;
  options.host = kLoopback;
  // A lane per local rank: a rank that re-inits its process group gets fresh keys.
  options.lane_env = "LOCAL_RANK";
  options.torch_legacy_protocol = cfg_.rendezvous.torch_legacy_protocol;
  // A store restarting under systemd comes back within the keep-alive window.
  options.connect_timeout = rdzv::keep_alive_window(cfg_.rendezvous);
  torch_store_ = std::make_unique<store::TorchStoreProxy>(options);
  torch_store_->start();
}

void WorkerServices::point_torch_store(const rdzv::RendezvousResult& r) {
  if (!torch_store_) return;
  torch_store_->set_target({r.store_endpoint, cfg_.rendezvous.token, r.worker_prefix});
  log_->debug("torch workers' store port={} forwards to store={} prefix={}", torch_store_->port(),
              r.store_endpoint.to_string(), r.worker_prefix);
}

Endpoint WorkerServices::torch_store_endpoint() const {
  if (!torch_store_) return {};
  return {kLoopback, torch_store_->port()};
}

}  // namespace ddp::agent
