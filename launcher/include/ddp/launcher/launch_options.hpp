// ddprun's command line: torchrun's flags (both `_` and `-` spellings, and
// PET_<FLAG> env fallbacks) plus ours, parsed into a plain struct, then
// validated and translated into the agent's config. No CLI11 types here.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddp/agent/agent_config.hpp"

namespace ddp::launcher {

// The flags as typed (strings where torchrun takes strings), before validation.
struct LaunchOptions {
  std::string nnodes = "1:1";
  std::string nproc_per_node = "1";
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool master_port_given = false;
  bool standalone = false;
  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;
  std::string rdzv_id = "none";
  std::string rdzv_conf;
  int max_restarts = 0;
  std::string max_no_progress_restarts;      // empty: no limit
  int max_node_failures = 0;                 // 0: nodes are never excluded
  std::string node_failure_window = "3600";  // seconds
  double monitor_interval = 5.0;             // accepted for compatibility; monitoring is event-driven
  std::string start_method = "spawn";        // accepted for compatibility; workers are always exec'd
  std::string role = "default";
  std::string log_dir;
  std::string redirects = "0";
  std::string tee = "0";
  std::string local_ranks_filter;
  bool no_python = false;
  bool module = false;
  bool run_path = false;
  std::string local_addr;
  // Empty: "[rank ${rank}]:". Also TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE.
  std::string log_line_prefix_template;
  bool no_prefix = false;                  // console lines exactly as the workers wrote them
  std::string logs_specs;                  // torchrun's LogsSpecs plugin: accepted, the default only
  std::string event_log_handler = "null";  // torchrun's events handler: accepted, see --event_log
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  // torchrun 2.x: LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES naming the worker's one GPU.
  bool virtual_local_rank = false;
  // torchrun 2.x: lines holding any of these (comma-separated, ",," a comma)
  // are also written to <run dir>/attempt_<k>/filtered_std{out,err}.log.
  std::string duplicate_stdout_filters;
  std::string duplicate_stderr_filters;
  std::string print_completion;  // bash, zsh, tcsh: print a completion script and exit
  // Ours.
  double stop_timeout_s = 30.0;  // also torchrun 2.x's --shutdown_timeout, TORCH_ELASTIC_SHUTDOWN_TIMEOUT
  // Hang detection for workers using heartbeats and sections (docs/agent-liveness.md):
  // seconds or "auto"; empty: off.
  std::string heartbeat_timeout;
  std::string section_timeouts;  // "step=30,checkpoint=600", "auto", "step=auto"
  double auto_timeout_factor = 5.0;
  int auto_timeout_warmup = 10;
  // Stragglers (docs/agent-diagnosis.md, "Stragglers"): a rank over factor x the job's
  // median step time for `steps` steps in a row is named; factor 0: off.
  double straggler_factor = 2.0;
  int straggler_steps = 10;
  std::string straggler_action = "report";
  // What a worker's failure does: restart (every worker, a new round) or
  // reform (only the failed one is replaced; docs/reform.md).
  std::string on_failure = "restart";
  // Pass --local_rank=N, the torch.distributed.launch way. Neither switch: only
  // to a .py script that defines a --local_rank (or --local-rank) argument.
  bool legacy_local_rank = false;
  bool no_legacy_local_rank = false;
  bool use_env = false;  // torch.distributed.launch's flag: accepted, the default here
  std::string token_file;
  std::string log_level = "info";
  // Interpreter for scripts and -m; empty: torchrun's (the python in the
  // shebang of the torchrun on PATH), else python3 on PATH.
  std::string python;
  std::string event_log;  // JSON line per lifecycle event; empty: none
  // Modules a per-node zygote imports once; Python-script workers are forked
  // from it (docs/agent-preload.md, "Preloading"). "torch" or "torch,numpy"; empty: none.
  std::string preload;
  // Health checks before each rendezvous (docs/agent-recovery.md, "Health checks"),
  // as text so each is checked, and refused, by health_options.cpp.
  std::string health_check;  // a shell command; empty: none
  std::string health_check_timeout = "60";
  std::string health_paths;  // comma-separated directories
  std::string health_min_free_mb = "100";
  std::string health_gpus = "auto";  // auto, or a number of GPUs (0: no GPU check)
  std::string health_store_rtt_ms = "1000";
  std::string health_retries = "5";
  std::string health_retry_interval = "5";
  // One agent per host over ssh (ssh_launch.cpp): "h1,h2" or "h1:4,h2:4", or a
  // hostfile of `HOST slots=N` lines. Both empty: run here.
  std::string hosts;
  std::string hostfile;
  // torchrun's --numa-binding: node, socket, exclusive, core-complex; empty: none.
  std::string numa_binding;
  std::string config;  // --config FILE (JSON), already merged in
  bool print_config = false;
  // The program and its arguments, untouched.
  std::vector<std::string> program;
};

// What parse_command_line found.
struct ParseOutcome {
  enum class Kind { kRun, kHelp, kVersion, kPrintConfig } kind = Kind::kRun;
  LaunchOptions options;
  std::string text;  // help, version or --print-config text to print
  // One line each, for the caller to log once logging is set up: the command
  // line parsed, but maybe not as the user meant.
  std::vector<std::string> warnings;
};

// Parses argv (argv[0] is the program name). `env` supplies PET_* values
// (tests pass their own; main passes the process environment). Precedence:
// command line > --config file (or PET_CONFIG/DDP_CONFIG) > PET_<FLAG> (and
// DDP_<FLAG> for ddprun's own flags) > the Slurm job's env > defaults. Throws ConfigError with a
// one-line message naming the flag, or the file, line and key.
ParseOutcome parse_command_line(const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env);

// Host facts translate_options needs, injectable for tests.
struct HostInfo {
  std::string hostname;
  int pid = 0;
  int gpu_count = 0;
  // Asked for --nproc_per_node=gpu|auto when gpu_count is 0: NVML's count
  // (where /proc/driver/nvidia is missing, as on WSL2), nullopt without NVML.
  // current_host() sets it; empty in tests that give gpu_count.
  std::function<std::optional<int>()> probe_gpus;
  int cpu_count = 1;
  std::map<std::string, std::string> env;  // PATH lookups, CUDA_VISIBLE_DEVICES
};
HostInfo current_host();

// Validates the options and builds the agent's config: resolves the program
// (python3 -u for scripts and -m), nproc_per_node (int|gpu|cpu|auto), the
// rendezvous backend, --rdzv_conf keys. Throws ConfigError naming the flag.
agent::AgentConfig translate_options(const LaunchOptions& options, const HostInfo& host);

// The number of CUDA devices visible here without loading CUDA: entries of
// /proc/driver/nvidia/gpus, narrowed by CUDA_VISIBLE_DEVICES (HostInfo's
// probe_gpus asks NVML where that shows none).
int detect_gpu_count(const std::map<std::string, std::string>& env);

}  // namespace ddp::launcher
