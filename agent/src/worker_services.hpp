// What the agent serves its workers on this node, beside their processes, set
// up once per run before any worker starts: the environment they inherit, the
// loopback TCPStore endpoint torch workers get as MASTER_ADDR/MASTER_PORT
// (forwarded to the round's store), torch's FileTimer pipe (the liveness
// channel, docs/agent-liveness.md "Hung workers: torch's FileTimer"), the fence file their guards read, and
// the reaping of stale cgroups that must end before the first guard starts.
//
// Thread-safety: the io thread only (the proxy and the reaping run threads of
// their own).
#pragma once

#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>

#include "ddp/agent/agent_config.hpp"
#include "ddp/agent/worker_env.hpp"
#include "ddp/common/endpoint.hpp"
#include "ddp/store/torch_proxy.hpp"
#include "fence_file.hpp"
#include "file_timer_server.hpp"

namespace spdlog {
class logger;
}

namespace ddp::agent {

class WorkerServices {
 public:
  WorkerServices(boost::asio::io_context& io, const AgentConfig& cfg, std::shared_ptr<spdlog::logger> log);
  ~WorkerServices();
  WorkerServices(const WorkerServices&) = delete;
  WorkerServices& operator=(const WorkerServices&) = delete;

  // A walk of the cgroup hierarchy (milliseconds on a big host), run while
  // the first rendezvous runs; cgroups_reaped() waits for it.
  void reap_stale_cgroups();
  void wait_cgroups_reaped();  // the zygote starts guards too
  void cgroups_reaped();       // before the first spawn; rethrows what the walk threw

  // The fence backstop the guards read; the rendezvous moves its deadline.
  const std::shared_ptr<FenceFile>& fence() const { return fence_; }

  // The environment workers inherit, and the liveness channels opened for
  // them: TORCHELASTIC_ENABLE_FILE_TIMER=1 makes a FileTimer pipe (in
  // `run_dir` unless TORCHELASTIC_TIMER_FILE names one) whose requests go to
  // `on_request`. Throws ConfigError when the pipe cannot be made.
  void start(const std::filesystem::path& run_dir, std::function<void(const TimerRequest&)> on_request);
  const EnvMap& base_env() const { return base_env_; }
  const EnvMap& liveness_env() const { return liveness_env_; }

  // The loopback TCPStore torch workers get, bound before any rendezvous.
  void start_torch_store();
  // Forwards it to the round's store, under the round's worker prefix.
  void point_torch_store(const rdzv::RendezvousResult& r);
  Endpoint torch_store_endpoint() const;

 private:
  boost::asio::io_context& io_;
  const AgentConfig& cfg_;
  std::shared_ptr<spdlog::logger> log_;
  std::shared_ptr<FenceFile> fence_ = std::make_shared<FenceFile>();
  std::future<void> stale_cgroups_;
  EnvMap base_env_;
  EnvMap liveness_env_;                          // what workers get of the liveness channels
  std::unique_ptr<FileTimerServer> file_timer_;  // TORCHELASTIC_ENABLE_FILE_TIMER=1
  std::unique_ptr<store::TorchStoreProxy> torch_store_;
};

}  // namespace ddp::agent
