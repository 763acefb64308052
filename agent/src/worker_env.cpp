#include "ddp/agent/worker_env.hpp"

#include <sstream>

#include "ddp/common/error.hpp"

extern char** environ;

namespace ddp::agent {

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

bool sets_default_omp_threads(const EnvMap& base, const WorkerEnvInput& in) {
  return in.default_omp_threads && in.local_world_size > 1 && base.count("OMP_NUM_THREADS") == 0;
}

EnvMap build_worker_env(const EnvMap& base, const rdzv::RendezvousResult& round, const WorkerEnvInput& in) {
  EnvMap env = base;
  const int rank = round.rank_offset + in.local_rank;
  auto put = [&](const std::string& key, const std::string& value) { env[key] = value; };
  put("LOCAL_RANK", std::to_string(in.local_rank));
  put("RANK", std::to_string(rank));
  put("GROUP_RANK", std::to_string(round.group_rank));
  // One role per job: the role's ranks are the global ranks.
  put("ROLE_RANK", std::to_string(rank));
  put("ROLE_NAME", in.role);
  put("LOCAL_WORLD_SIZE", std::to_string(in.local_world_size));
  put("WORLD_SIZE", std::to_string(round.world_size));
  put("GROUP_WORLD_SIZE", std::to_string(round.group_world_size));
  put("ROLE_WORLD_SIZE", std::to_string(round.world_size));
  const Endpoint& master = in.torch_store.port != 0 ? in.torch_store : round.store_endpoint;
  put("MASTER_ADDR", master.host);
  put("MASTER_PORT", std::to_string(master.port));
  put("TORCHELASTIC_RESTART_COUNT", std::to_string(in.restart_count));
  put("TORCHELASTIC_MAX_RESTARTS", std::to_string(in.max_restarts));
  put("TORCHELASTIC_RUN_ID", in.run_id);
  // Python spelling, as torchrun writes str(True).
  put("TORCHELASTIC_USE_AGENT_STORE", "True");
  put("TORCHELASTIC_ERROR_FILE", in.error_file);
  // torchrun 2.x defaults this so that NCCL errors abort instead of hanging.
  // Torch before 2.2 read NCCL_ASYNC_ERROR_HANDLING instead (torchrun 1.13 set
  // that), but torch 2.2+ warns in every process where that one is set, so it
  // is left to the user.
  if (base.count("TORCH_NCCL_ASYNC_ERROR_HANDLING") == 0) put("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  if (sets_default_omp_threads(base, in)) put("OMP_NUM_THREADS", "1");
  if (in.virtual_local_rank) {
    // As torchrun 2.x: the local rank's entry of the visible devices (HIP's
    // when set, else CUDA's), else its index; HIP_VISIBLE_DEVICES follows.
    put("LOCAL_RANK", "0");
    const auto hip = base.find("HIP_VISIBLE_DEVICES");
    const bool use_hip = hip != base.end() && !hip->second.empty();
    const auto parent = use_hip ? hip : base.find("CUDA_VISIBLE_DEVICES");
    std::string gpu = std::to_string(in.local_rank);
    if (parent != base.end()) {
      std::vector<std::string> items;
      std::stringstream list(parent->second);
      for (std::string item; std::getline(list, item, ',');) items.push_back(item);
      if (static_cast<std::size_t>(in.local_rank) >= items.size()) {
        throw ConfigError("--virtual_local_rank: local rank " + std::to_string(in.local_rank) +
                          " has no GPU in " + parent->first + "=" + parent->second +
                          "; fix --nproc_per_node or " + parent->first);
      }
      gpu = items[static_cast<std::size_t>(in.local_rank)];
      gpu.erase(0, gpu.find_first_not_of(" \t"));
      gpu.erase(gpu.find_last_not_of(" \t") + 1);
    }
    put("CUDA_VISIBLE_DEVICES", gpu);
    if (use_hip) put("HIP_VISIBLE_DEVICES", gpu);
  }
  put("DDP_STORE_ENDPOINT", round.store_endpoint.to_string());
  put("DDP_STORE_PREFIX", round.worker_prefix);
  env.erase("DDP_REFORM");
  env.erase("DDP_REFORM_JOINING");
  env.erase("DDP_REFORM_BASE_WORLD");
  if (in.reform) {
    put("DDP_REFORM", "1");
    if (in.reform_joining) put("DDP_REFORM_JOINING", "1");
    if (in.reform_base_world > 0) put("DDP_REFORM_BASE_WORLD", std::to_string(in.reform_base_world));
  }
  if (!in.token_file.empty()) {
    put("DDP_TOKEN_FILE", in.token_file);
  } else {
    env.erase("DDP_TOKEN_FILE");
  }
  return env;
}

std::vector<std::string> to_env_strings(const EnvMap& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace ddp::agent
