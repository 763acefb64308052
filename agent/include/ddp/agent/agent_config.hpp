// Everything the per-node agent needs, as a plain struct: filled by the
// launcher's CLI (or a config file, or PET_* env vars) and validated there.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "ddp/agent/health_config.hpp"
#include "ddp/agent/liveness_config.hpp"
#include "ddp/agent/std_streams.hpp"
#include "ddp/rdzv/rendezvous.hpp"

namespace ddp::agent {

// --numa_binding strategies (torch.distributed.run's --numa-binding).
enum class NumaBinding { kNone, kNode, kSocket, kExclusive, kCoreComplex };

// --on_failure: what a local worker's failure does (docs/agent-recovery.md, "Re-forming
// in place"). kRestart stops every worker and starts a new round; kReform
// replaces only the failed one and lets the workers re-form (docs/reform.md).
enum class OnFailure { kRestart, kReform };

struct AgentConfig {
  // The worker command: argv[0] is an absolute path to an executable (python3
  // already prepended for scripts); the rest are passed untouched.
  std::vector<std::string> argv;
  // Index in argv after which "--local_rank=N" is inserted (the
  // torch.distributed.launch convention); negative: never.
  int local_rank_arg_index = -1;
  // --preload: modules a per-node zygote imports once; workers are forked from
  // it. Set only when argv is {python, "-u", SCRIPT, ARGS...} (not -m, not
  // --no_python): the launcher guarantees it.
  std::vector<std::string> preload;

  int nproc_per_node = 1;
  std::string role = "default";
  int max_restarts = 0;
  OnFailure on_failure = OnFailure::kRestart;
  // --max_no_progress_restarts: at most this many restarts in a row after
  // attempts that showed no progress (no heartbeat, no completed section);
  // the next such failure stops the job with exit 4. Unset: no such limit.
  std::optional<int> max_no_progress_restarts;
  // --max_node_failures / --node_failure_window: a node whose workers fail
  // this many times within the window is excluded from the job's later
  // rounds, and its agent exits 6 (docs/agent-recovery.md, "Bad nodes kept out").
  // 0: never.
  int max_node_failures = 0;
  std::chrono::milliseconds node_failure_window{std::chrono::hours(1)};
  // SIGTERM -> SIGKILL grace when stopping workers; torchrun's default is 30 s.
  std::chrono::milliseconds stop_timeout{std::chrono::seconds(30)};
  // Heartbeat and section timeouts; off by default.
  LivenessConfig liveness;

  // Signals the agent handles (torchrun's --signals_to_handle). SIGINT,
  // SIGTERM, SIGHUP and SIGQUIT stop the workers with that signal; any other
  // (SIGUSR1, SIGUSR2: preemption notices) is forwarded to every worker's
  // process group and the run goes on.
  std::vector<int> signals_to_handle{2, 15, 1, 3};  // SIGINT, SIGTERM, SIGHUP, SIGQUIT

  // Empty: logs, error files and failure reports go to a per-run temp dir
  // (removed after a successful run, kept and named after a failed one).
  std::filesystem::path log_dir;
  StdSpec redirects;
  StdSpec tee;
  // Console line prefix; ${rank}, ${local_rank} and ${role_name} are replaced
  // (torchrun's TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE). Empty: no prefix.
  std::string line_prefix_template = "[rank ${rank}]:";
  // Local ranks whose lines reach the console; empty: all.
  std::vector<int> local_ranks_filter;
  // Lines holding any of these also go to attempt_<k>/filtered_stdout.log
  // (stderr: filtered_stderr.log), every local rank's, prefixed; empty: none.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  // torchrun's --virtual_local_rank: every worker gets LOCAL_RANK=0 and only
  // its own GPU in CUDA_VISIBLE_DEVICES.
  bool virtual_local_rank = false;

  // Set OMP_NUM_THREADS=1 for workers when the agent's env lacks it and
  // nproc_per_node > 1 (torchrun does the same to avoid oversubscription).
  bool default_omp_threads = true;

  // Appends one JSON line per lifecycle event (rendezvous, worker start/exit,
  // restart, scale, success/failure, shutdown); empty: none.
  std::filesystem::path event_log;

  // Token file passed to workers as DDP_TOKEN_FILE; empty: none.
  std::filesystem::path token_file;

  // --numa_binding: CPU affinity of each worker (numa_binding.hpp); kNone: none.
  NumaBinding numa_binding = NumaBinding::kNone;

  // Checks before each rendezvous (--health_*); an unhealthy node does not join.
  HealthConfig health;

  rdzv::RendezvousConfig rendezvous;
  rdzv::NodeSpec node;  // node_id, host, local_world_size (== nproc_per_node)
};

}  // namespace ddp::agent
