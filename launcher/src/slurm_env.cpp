// Slurm env -> ddprun option values. Which variables mean what:
// https://slurm.schedmd.com/srun.html#SECTION_OUTPUT-ENVIRONMENT-VARIABLES
// In a job step (srun) the SLURM_STEP_* variables describe the step, which may
// use fewer nodes than the job; SLURM_NODEID is relative to the step. The batch
// script runs on the job's first node only, with no SLURM_STEP_ID.
#include "slurm_env.hpp"

#include <netdb.h>
#include <sys/socket.h>

#include <cstdio>
#include <memory>

#include "ddp/common/error.hpp"
#include "ddp/common/hostlist.hpp"
#include "ddp/common/parse.hpp"

namespace ddp::launcher {
namespace {

using Env = std::map<std::string, std::string>;

constexpr const char* kOptOut = "; or set DDP_SLURM=0 to ignore the Slurm env";

const std::string* get(const Env& env, const std::string& name) {
  const auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

// The first of `names` that is set, with its name.
std::pair<std::string, std::string> first_of(const Env& env, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (const auto* v = get(env, n)) return {n, *v};
  }
  return {};
}

std::uint64_t number(const std::string& name, const std::string& value) {
  const auto v = parse_int<std::uint64_t>(value);
  if (!v) throw ConfigError(name + "='" + value + "' is not a number: the Slurm env is broken" + kOptOut);
  return *v;
}

// Devices in CUDA_VISIBLE_DEVICES ("0,1", "GPU-uuid,..."); Slurm writes
// NoDevFiles when the step has none.
int count_devices(const std::string& list) {
  if (list.empty() || list == "NoDevFiles") return 0;
  int n = 1;
  for (char c : list) n += c == ',' ? 1 : 0;
  return n;
}

bool name_is_safe(const std::string& s) {
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '.' || c == '_';
    if (!ok) return false;
  }
  return !s.empty();
}

}  // namespace

std::string slurm_node_addr(const std::string& node) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(node.c_str(), nullptr, &hints, &found) == 0) {
    freeaddrinfo(found);
    return node;
  }
  // A NodeName that is not a DNS name (NodeAddr differs): ask the controller.
  if (!name_is_safe(node)) return node;
  const std::string cmd = "scontrol show node -o " + node + " 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "re"), pclose);
  if (!pipe) return node;
  std::string text;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof(buf), pipe.get())) text.append(buf, n);
  const auto at = text.find(" NodeAddr=");
  if (at == std::string::npos) return node;
  const auto begin = at + 10;
  const std::string addr = text.substr(begin, text.find_first_of(" \n", begin) - begin);
  return addr.empty() ? node : addr;
}

std::map<std::string, std::string> slurm_option_values(const Env& env, const Env& set_above, bool standalone,
                                                       const NodeAddrLookup& lookup) {
  std::map<std::string, std::string> out;
  const auto* job_text = get(env, "SLURM_JOB_ID");
  if (job_text == nullptr) job_text = get(env, "SLURM_JOBID");
  if (job_text == nullptr) return out;
  if (const auto* opt = get(env, "DDP_SLURM"); opt != nullptr && !parse_bool_or_throw(*opt, "env DDP_SLURM"))
    return out;
  const auto above = [&set_above](const char* name) { return set_above.count(name) != 0; };
  const auto set = [&](const char* name, const std::string& value) {
    if (!above(name)) out[name] = value;
  };

  // Workers: the GPUs Slurm gave this node's step, else one.
  if (const auto* gpus = get(env, "SLURM_GPUS_ON_NODE");
      gpus != nullptr && number("SLURM_GPUS_ON_NODE", *gpus) > 0) {
    set("nproc_per_node", std::to_string(number("SLURM_GPUS_ON_NODE", *gpus)));
  } else if (const auto* cvd = get(env, "CUDA_VISIBLE_DEVICES"); cvd != nullptr && count_devices(*cvd) > 0) {
    set("nproc_per_node", std::to_string(count_devices(*cvd)));
  } else {
    set("nproc_per_node", "1");
  }
  // sbatch --signal=USR1@N notices reach the workers instead of killing ddprun.
  set("signals_to_handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2");
  if (standalone) return out;

  const std::uint64_t job = number("SLURM_JOB_ID", *job_text);
  const auto* step_text = get(env, "SLURM_STEP_ID");
  if (step_text == nullptr) step_text = get(env, "SLURM_STEPID");
  const bool in_step = step_text != nullptr;
  const std::uint64_t step = in_step ? number("SLURM_STEP_ID", *step_text) : 0;

  const auto [nnodes_var, nnodes_text] =
      in_step ? first_of(env, {"SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"})
              : first_of(env, {"SLURM_JOB_NUM_NODES", "SLURM_NNODES"});
  if (nnodes_var.empty()) {
    throw ConfigError(
        "SLURM_JOB_ID is set but SLURM_JOB_NUM_NODES is not: the Slurm env is incomplete; give --nnodes" +
        std::string(kOptOut));
  }
  const std::uint64_t nnodes = number(nnodes_var, nnodes_text);
  const std::string node_text = get(env, "SLURM_NODEID") ? env.at("SLURM_NODEID") : "0";
  const std::uint64_t node_rank = number("SLURM_NODEID", node_text);
  if (nnodes < 1 || node_rank >= nnodes) {
    throw ConfigError("SLURM_NODEID=" + node_text + " is not below " + nnodes_var + "=" + nnodes_text +
                      ": the Slurm env is inconsistent; give --node_rank and --nnodes" + kOptOut);
  }
  if (!in_step && nnodes > 1 && !above("nnodes")) {
    throw ConfigError(
        "outside an srun step (a batch script, an salloc shell) ddprun runs once, on the first of the "
        "job's " +
        nnodes_text + " nodes (" + nnodes_var +
        "): start one per node with `srun --ntasks-per-node=1 ddprun ...`" + kOptOut);
  }
  if (const auto* tpn = get(env, "SLURM_STEP_TASKS_PER_NODE");
      in_step && tpn != nullptr && !above("rdzv_backend")) {
    const auto counts = expand_count_list(*tpn, "SLURM_STEP_TASKS_PER_NODE");
    if (node_rank < counts.size() && counts[node_rank] > 1) {
      throw ConfigError("SLURM_STEP_TASKS_PER_NODE=" + *tpn +
                        ": ddprun starts the workers of a node itself, "
                        "so run one ddprun per node (srun --ntasks-per-node=1) and give the workers per node "
                        "with --nproc_per_node" +
                        kOptOut);
    }
  }

  const auto [list_var, list_text] =
      in_step ? first_of(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})
              : first_of(env, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  // One node: no fixed port, the store takes a free one (no collision at all).
  if (nnodes > 1 && !above("master_addr")) {
    if (list_var.empty()) {
      throw ConfigError("SLURM_JOB_ID is set but SLURM_JOB_NODELIST is not: give --master_addr" +
                        std::string(kOptOut));
    }
    const auto hosts = expand_hostlist(list_text, list_var);
    if (hosts.size() != nnodes) {
      throw ConfigError(list_var + "='" + list_text + "' names " + std::to_string(hosts.size()) +
                        " hosts but " + nnodes_var + "=" + nnodes_text +
                        ": the Slurm env is inconsistent; give --master_addr" + kOptOut);
    }
    set("master_addr", lookup(hosts.front()));
  }
  set("nnodes", std::to_string(nnodes));
  set("node_rank", std::to_string(node_rank));
  if (nnodes > 1) set("master_port", std::to_string(slurm_store_port(job, step)));
  set("rdzv_id", in_step ? *job_text + "." + *step_text : *job_text);
  return out;
}

}  // namespace ddp::launcher
