// --preload: the agent starts the zygote before its first rendezvous, so the
// imports overlap the rendezvous, and hands it to the worker group.
#include <unistd.h>

#include "agent_impl.hpp"
#include "ddp/common/logging.hpp"
#include "guard_protocol.hpp"

namespace ddp::agent {

void Agent::Impl::start_preload() {
  if (cfg.preload.empty()) return;
  // What every worker of this node has in common. The variables a module
  // reads when it is loaded come from here: libgomp reads OMP_NUM_THREADS in
  // its loader, so the default workers would get is set for the zygote too.
  EnvMap env = services.base_env();
  WorkerEnvInput in;
  in.local_world_size = cfg.nproc_per_node;
  in.default_omp_threads = cfg.default_omp_threads;
  if (sets_default_omp_threads(services.base_env(), in)) {
    // The per-worker value, so that the two never differ.
    env["OMP_NUM_THREADS"] =
        build_worker_env(services.base_env(), rdzv::RendezvousResult{}, in).at("OMP_NUM_THREADS");
  }
  // The zygote starts the guards of the workers it forks: it passes this on.
  if (!services.fence()->path().empty()) env[guard::kFenceFileEnv] = services.fence()->path();
  const auto socket = run_dir->path() / RunDir::kZygoteSocket;
  zygote = std::make_unique<PreloadZygote>(io, cfg.argv.at(0), cfg.preload, socket, to_env_strings(env),
                                           log::get("agent"));
  zygote->start();
  group->use_zygote(zygote.get());
}

}  // namespace ddp::agent
