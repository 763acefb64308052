// The environment of one worker: the agent's own environment plus the
// torchrun contract (docs/agent-workers.md, "Env contract") and our DDP_* additions. Pure, unit-tested.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ddp/common/endpoint.hpp"
#include "ddp/rdzv/rendezvous.hpp"

namespace ddp::agent {

struct WorkerEnvInput {
  int local_rank = 0;
  int local_world_size = 1;
  std::string role = "default";
  int restart_count = 0;
  int max_restarts = 0;
  std::string run_id;
  std::string error_file;  // TORCHELASTIC_ERROR_FILE
  std::string token_file;  // DDP_TOKEN_FILE; empty: not set
  bool default_omp_threads = true;
  // torchrun's --virtual_local_rank: LOCAL_RANK=0 and only this rank's GPU visible.
  bool virtual_local_rank = false;
  // MASTER_ADDR/MASTER_PORT: the agent's torch store proxy, which puts torch's
  // keys under the round's worker_prefix. Port 0: the round's store itself.
  Endpoint torch_store;
  // --on_failure=reform (docs/reform.md): DDP_REFORM=1, and on a
  // replacement DDP_REFORM_JOINING=1. Otherwise neither is set, even when
  // inherited.
  bool reform = false;
  bool reform_joining = false;
  // > 0: DDP_REFORM_BASE_WORLD, the world the workers' R/size counts from when
  // it is not WORLD_SIZE (a node joining a running round; docs/reform.md).
  int reform_base_world = 0;
};

using EnvMap = std::map<std::string, std::string>;

// The agent's environment (environ) as a map.
EnvMap current_environment();

// Builds the worker's complete environment. Contract variables replace any
// inherited value; OMP_NUM_THREADS=1 is added only when the base lacks it and
// local_world_size > 1.
EnvMap build_worker_env(const EnvMap& base, const rdzv::RendezvousResult& round, const WorkerEnvInput& in);

// True when build_worker_env would add OMP_NUM_THREADS (the agent logs it once).
bool sets_default_omp_threads(const EnvMap& base, const WorkerEnvInput& in);

// "KEY=VALUE" strings for execve.
std::vector<std::string> to_env_strings(const EnvMap& env);

}  // namespace ddp::agent
