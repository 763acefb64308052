// parse_env(): the launcher's env contract (docs/worker-sdk.md, "Env contract").
#include <cstdlib>
#include <map>
#include <string>

#include "ddp/common/endpoint.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/hostlist.hpp"
#include "ddp/common/parse.hpp"
#include "ddp/init.hpp"

namespace ddp {
namespace {

constexpr const char* kHowToLaunch =
    "start this program with ddprun (or torchrun, or srun), or set RANK, WORLD_SIZE, MASTER_ADDR and "
    "MASTER_PORT";

class Env {
 public:
  explicit Env(const EnvLookup& lookup) : lookup_(lookup) {}

  std::optional<std::string> get(std::string_view name) const {
    auto v = lookup_(name);
    if (v && v->empty()) return std::nullopt;
    return v;
  }

  std::string required(std::string_view name) const {
    auto v = get(name);
    if (!v) throw ConfigError(std::string(name) + " is not set: " + kHowToLaunch);
    return *v;
  }

  long long integer(std::string_view name, const std::string& text, long long min, long long max) const {
    // Digits only: "-1" is "not a number" here, as the env contract has no negative values.
    const auto parsed = text.starts_with('-') ? std::nullopt : parse_int<long long>(text);
    const bool ok = parsed.has_value();
    const long long value = parsed.value_or(0);
    if (!ok || value < min || value > max) {
      throw ConfigError(std::string(name) + "='" + text + "' is not " +
                        (ok ? "in range " + std::to_string(min) + ".." + std::to_string(max)
                            : std::string("a number: expected an integer >= ") + std::to_string(min)));
    }
    return value;
  }

  int integer_or(std::string_view name, int fallback, long long min) const {
    auto v = get(name);
    return v ? static_cast<int>(integer(name, *v, min, 1 << 30)) : fallback;
  }

 private:
  const EnvLookup& lookup_;
};

// Tasks started by `srun` directly (one per GPU, no launcher) have no RANK or
// WORLD_SIZE; Slurm's own variables say the same. Returns the torchrun-style
// values they imply, for the names the env lacks; empty outside such a task.
std::map<std::string, std::string> slurm_fallback(const Env& env) {
  std::map<std::string, std::string> out;
  const auto procid = env.get("SLURM_PROCID");
  if (env.get("RANK") || env.get("WORLD_SIZE") || !procid) return out;
  auto ntasks = env.get("SLURM_STEP_NUM_TASKS");
  if (!ntasks) ntasks = env.get("SLURM_NTASKS");
  if (!ntasks) return out;
  out["RANK"] = *procid;
  out["WORLD_SIZE"] = *ntasks;
  const std::string node = env.get("SLURM_NODEID").value_or("0");
  out["GROUP_RANK"] = node;
  if (auto local = env.get("SLURM_LOCALID")) out["LOCAL_RANK"] = *local;
  auto per_node = env.get("SLURM_STEP_TASKS_PER_NODE");
  const char* per_node_name = "SLURM_STEP_TASKS_PER_NODE";
  if (!per_node) {
    per_node = env.get("SLURM_TASKS_PER_NODE");
    per_node_name = "SLURM_TASKS_PER_NODE";
  }
  if (per_node) {
    const auto counts = expand_count_list(*per_node, per_node_name);
    const auto index = static_cast<std::size_t>(env.integer("SLURM_NODEID", node, 0, 1 << 30));
    if (index < counts.size()) out["LOCAL_WORLD_SIZE"] = std::to_string(counts[index]);
  }
  const auto job = env.get("SLURM_JOB_ID");
  const auto step = env.get("SLURM_STEP_ID");
  if (job) out["TORCHELASTIC_RUN_ID"] = *job + (step ? "." + *step : "");
  // Rank 0 is on the step's first node; the port is the one ddprun would pick.
  auto nodes = env.get("SLURM_STEP_NODELIST");
  const char* nodes_name = "SLURM_STEP_NODELIST";
  if (!nodes) {
    nodes = env.get("SLURM_JOB_NODELIST");
    nodes_name = "SLURM_JOB_NODELIST";
  }
  if (nodes && !env.get("MASTER_ADDR")) out["MASTER_ADDR"] = expand_hostlist(*nodes, nodes_name).front();
  if (job && !env.get("MASTER_PORT")) {
    const auto job_id = static_cast<std::uint64_t>(env.integer("SLURM_JOB_ID", *job, 0, 1LL << 62));
    const auto step_id =
        step ? static_cast<std::uint64_t>(env.integer("SLURM_STEP_ID", *step, 0, 1LL << 62)) : 0;
    out["MASTER_PORT"] = std::to_string(slurm_store_port(job_id, step_id));
  }
  return out;
}

}  // namespace

Context parse_env(const EnvLookup& process_lookup) {
  const auto slurm = slurm_fallback(Env(process_lookup));
  const EnvLookup lookup = [&](std::string_view name) -> std::optional<std::string> {
    if (auto it = slurm.find(std::string(name)); it != slurm.end()) return it->second;
    return process_lookup(name);
  };
  const Env env(lookup);
  Context ctx;
  const std::string rank_text = env.required("RANK");
  const std::string world_text = env.required("WORLD_SIZE");
  ctx.world_size = static_cast<int>(env.integer("WORLD_SIZE", world_text, 1, 1 << 30));
  ctx.rank = static_cast<int>(env.integer("RANK", rank_text, 0, 1 << 30));
  if (ctx.rank >= ctx.world_size) {
    throw ConfigError("RANK=" + rank_text + " is out of range for WORLD_SIZE=" + world_text +
                      " (must be 0.." + std::to_string(ctx.world_size - 1) + ")");
  }
  // Without LOCAL_* the job is taken to be on one host (hand-set env on a laptop).
  ctx.local_world_size = env.integer_or("LOCAL_WORLD_SIZE", ctx.world_size, 1);
  ctx.local_rank = env.integer_or("LOCAL_RANK", ctx.rank % ctx.local_world_size, 0);
  if (ctx.local_rank >= ctx.local_world_size) {
    throw ConfigError("LOCAL_RANK=" + std::to_string(ctx.local_rank) +
                      " is out of range for LOCAL_WORLD_SIZE=" + std::to_string(ctx.local_world_size));
  }
  ctx.group_rank = env.integer_or("GROUP_RANK", 0, 0);
  ctx.restart_count = env.integer_or("TORCHELASTIC_RESTART_COUNT", 0, 0);
  ctx.run_id = env.get("TORCHELASTIC_RUN_ID").value_or("none");
  ctx.error_file = env.get("TORCHELASTIC_ERROR_FILE").value_or("");
  ctx.master_addr = env.get("MASTER_ADDR").value_or("");
  if (auto port = env.get("MASTER_PORT")) ctx.master_port = parse_port(*port, "MASTER_PORT");

  if (auto endpoint = env.get("DDP_STORE_ENDPOINT")) {
    ctx.store_endpoint = parse_endpoint(*endpoint, "DDP_STORE_ENDPOINT").to_string();
  } else {
    // Rank 0 hosts the store (docs/worker-sdk.md, "Without ddprun").
    if (ctx.master_addr.empty()) throw ConfigError(std::string("MASTER_ADDR is not set: ") + kHowToLaunch);
    if (!env.get("MASTER_PORT")) throw ConfigError(std::string("MASTER_PORT is not set: ") + kHowToLaunch);
    int port = ctx.master_port;
    // torchrun's static rendezvous keeps its own TCPStore (PyTorch's protocol,
    // not ours) on MASTER_PORT; our store then lives on the next port.
    if (env.get("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True") {
      if (port == 65535)
        throw ConfigError("MASTER_PORT=65535 leaves no port for the ddp store; use a lower MASTER_PORT");
      ++port;
    }
    if (port == 0)
      throw ConfigError("MASTER_PORT=0 is not a usable port when rank 0 hosts the store: pick a free port");
    ctx.store_endpoint = Endpoint{ctx.master_addr, static_cast<std::uint16_t>(port)}.to_string();
  }
  ctx.store_prefix = env.get("DDP_STORE_PREFIX").value_or("ddp/sdk/");
  return ctx;
}

Context parse_env() {
  return parse_env([](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  });
}

}  // namespace ddp
