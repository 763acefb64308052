#include "launch_flags.hpp"

namespace ddp::launcher {
namespace {

const FlagSpec kFlags[] = {
    {"nnodes", &LaunchOptions::nnodes, kNodeGroup, "Number of nodes, or the range of nodes in form MIN:MAX"},
    {"nproc_per_node", &LaunchOptions::nproc_per_node, kNodeGroup,
     "Number of workers per node; supported values: [auto, cpu, gpu, int]"},

    {"rdzv_backend", &LaunchOptions::rdzv_backend, kRdzvGroup,
     "Rendezvous backend: static, c10d (alias ddp), etcd"},
    {"rdzv_endpoint", &LaunchOptions::rdzv_endpoint, kRdzvGroup,
     "Rendezvous backend endpoint; usually in form HOST:PORT"},
    {"rdzv_id", &LaunchOptions::rdzv_id, kRdzvGroup, "User-defined group id"},
    {"rdzv_conf", &LaunchOptions::rdzv_conf, kRdzvGroup,
     "Additional rendezvous configuration (KEY1=VALUE1,KEY2=VALUE2,...): join_timeout, "
     "last_call_timeout, close_timeout, keep_alive_interval, keep_alive_max_attempt, timeout, "
     "read_timeout, is_host"},
    {"standalone", &LaunchOptions::standalone, kRdzvGroup,
     "Start a local rendezvous store on a free port; for single-node, multi-worker jobs. "
     "--rdzv_backend, --rdzv_endpoint and --rdzv_id are then auto-assigned"},

    {"max_restarts", &LaunchOptions::max_restarts, kLaunchGroup,
     "Maximum number of worker group restarts before failing"},
    {"monitor_interval", &LaunchOptions::monitor_interval, kLaunchGroup,
     "Accepted for compatibility; ddprun reacts to worker exits as they happen"},
    {"start_method", &LaunchOptions::start_method, kLaunchGroup,
     "Accepted for compatibility (spawn, fork, forkserver)"},
    {"role", &LaunchOptions::role, kLaunchGroup, "User-defined role for the workers"},
    {"module", &LaunchOptions::module, kLaunchGroup,
     "Interpret the program as a Python module, executing as `python -m`", "-m"},
    {"no_python", &LaunchOptions::no_python, kLaunchGroup,
     "Execute the program directly instead of prepending `python3 -u`"},
    {"run_path", &LaunchOptions::run_path, kLaunchGroup,
     "Run the program as a Python script path even without a .py suffix"},
    {"signals_to_handle", &LaunchOptions::signals_to_handle, kLaunchGroup,
     "Signals ddprun handles: SIGINT, SIGTERM, SIGHUP, SIGQUIT stop the workers with that "
     "signal; others (SIGUSR1, SIGUSR2) are forwarded to the workers, which keep running"},
    {"virtual_local_rank", &LaunchOptions::virtual_local_rank, kLaunchGroup,
     "Every worker gets LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES naming only its own GPU (the "
     "local rank's entry of CUDA_VISIBLE_DEVICES, else its index)"},
    {"local_addr", &LaunchOptions::local_addr, kLaunchGroup,
     "Address of this node as other nodes reach it (default: the hostname)"},

    {"log_dir", &LaunchOptions::log_dir, kLogsGroup,
     "Base directory for log files: <log_dir>/<rdzv_id>/attempt_<k>/<local_rank>/"},
    {"redirects", &LaunchOptions::redirects, kLogsGroup,
     "Redirect std streams into log files (e.g. -r 3 both streams of every worker; -r 0:1,1:2 "
     "stdout of local rank 0 and stderr of local rank 1)",
     "-r"},
    {"tee", &LaunchOptions::tee, kLogsGroup,
     "Tee std streams into log files and also to the console (format as -r)", "-t"},
    {"logs_specs", &LaunchOptions::logs_specs, kLogsGroup,
     "Accepted for torchrun compatibility; ddprun's log layout is torchrun's default one"},
    {"event_log_handler", &LaunchOptions::event_log_handler, kLogsGroup,
     "Accepted for torchrun compatibility (null, console); ddprun writes events with "
     "--event_log"},
    {"log_line_prefix_template", &LaunchOptions::log_line_prefix_template, kLogsGroup,
     "Console line prefix with ${rank}, ${local_rank}, ${role_name} (default "
     "\"[rank ${rank}]:\"; also TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)"},
    {"no_prefix", &LaunchOptions::no_prefix, kLogsGroup,
     "Console lines exactly as the workers wrote them, no prefix"},
    {"local_ranks_filter", &LaunchOptions::local_ranks_filter, kLogsGroup,
     "Only show the console output of these local ranks (e.g. 0,2)"},
    {"duplicate_stdout_filters", &LaunchOptions::duplicate_stdout_filters, kLogsGroup,
     "Also write the stdout lines holding any of these words (e.g. 'loss,error'; ',,' is a "
     "comma) to <log dir>/attempt_<k>/filtered_stdout.log"},
    {"duplicate_stderr_filters", &LaunchOptions::duplicate_stderr_filters, kLogsGroup,
     "As --duplicate_stdout_filters, for stderr: filtered_stderr.log"},

    {"node_rank", &LaunchOptions::node_rank, kLegacyGroup,
     "Rank of the node for multi-node distributed training"},
    {"master_addr", &LaunchOptions::master_addr, kLegacyGroup,
     "Address of the master node (rank 0); IPv6 as [::1]"},
    {"master_port", &LaunchOptions::master_port, kLegacyGroup,
     "Port on the master node (rank 0), default 29500"},

    // torchrun 2.x calls it --shutdown_timeout (env TORCH_ELASTIC_SHUTDOWN_TIMEOUT).
    {"stop_timeout", &LaunchOptions::stop_timeout_s, kOursGroup,
     "Seconds between SIGTERM and SIGKILL when stopping workers (default 30, as "
     "torchrun; also TORCH_ELASTIC_SHUTDOWN_TIMEOUT)",
     "", "shutdown_timeout"},
    {"heartbeat_timeout", &LaunchOptions::heartbeat_timeout, kOursGroup,
     "Kill (and restart, as a failure) a worker whose ddp::heartbeat() stops for this many "
     "seconds, counted from its first heartbeat; `auto` learns it from the worker's own "
     "heartbeat gaps (default: off)"},
    {"section_timeouts", &LaunchOptions::section_timeouts, kOursGroup,
     "Per-section timeouts for ddp::Section scopes: step=30,checkpoint=600; NAME=auto or `auto` "
     "(every section) learns them (default: off)"},
    {"on_failure", &LaunchOptions::on_failure, kOursGroup,
     "What a worker's failure does: `restart` stops every worker and restarts the group; `reform` "
     "keeps the other workers running, starts a replacement (within --max_restarts) and lets them "
     "re-form in place, for ddp::ElasticGroup trainers (default restart)"},
    {"max_no_progress_restarts", &LaunchOptions::max_no_progress_restarts, kOursGroup,
     "Stop with exit 4 instead of restarting once this many restarts in a row followed attempts "
     "that made no progress (no heartbeat, no completed section) (default: no limit)"},
    // Bad nodes kept out (docs/agent-recovery.md, "Bad nodes kept out").
    {"max_node_failures", &LaunchOptions::max_node_failures, kOursGroup,
     "Exclude this node from the job's later rounds, and exit 6, once its workers failed this "
     "many times within --node_failure_window; the job goes on while MIN nodes are left, with a "
     "hot spare if one waits (default 0: never; refused with --standalone, where it could only end the job)"},
    {"node_failure_window", &LaunchOptions::node_failure_window, kOursGroup,
     "Seconds over which --max_node_failures counts a node's failures (default 3600)"},
    {"auto_timeout_factor", &LaunchOptions::auto_timeout_factor, kOursGroup,
     "An `auto` timeout is this times the longest section (or heartbeat gap) seen, at least 1 s "
     "(default 5)"},
    {"auto_timeout_warmup", &LaunchOptions::auto_timeout_warmup, kOursGroup,
     "Completed sections (or heartbeat gaps) an `auto` timeout learns from before it applies "
     "(default 10)"},
    {"straggler_factor", &LaunchOptions::straggler_factor, kOursGroup,
     "Name a rank as a straggler when its step time (a completed `step` section, else the time "
     "between heartbeats) is over this times the job's median; 0: off (default 2)"},
    {"straggler_steps", &LaunchOptions::straggler_steps, kOursGroup,
     "Steps in a row a rank must be over --straggler_factor to be named (default 10)"},
    {"straggler_action", &LaunchOptions::straggler_action, kOursGroup,
     "What naming a straggler does: `report` (log, status, event log); `restart` also kills it, with "
     "its stacks, as a failure of the attempt (default report)"},
    {"legacy_local_rank", &LaunchOptions::legacy_local_rank, kOursGroup,
     "Pass --local_rank=N to the program, the torch.distributed.launch way (default: only "
     "to a .py script that defines a --local_rank argument)"},
    {"no_legacy_local_rank", &LaunchOptions::no_legacy_local_rank, kOursGroup,
     "Never pass --local_rank=N, even to a script that defines the argument"},
    {"use_env", &LaunchOptions::use_env, kOursGroup,
     "Accepted for torch.distributed.launch compatibility: the env always carries LOCAL_RANK"},
    {"token_file", &LaunchOptions::token_file, kOursGroup,
     "File holding the store's auth token; workers get it as DDP_TOKEN_FILE"},
    {"log_level", &LaunchOptions::log_level, kOursGroup,
     "ddprun's own log level: trace, debug, info, warn, error, off"},
    {"python", &LaunchOptions::python, kOursGroup,
     "Interpreter for scripts and -m (default $PYTHON_EXEC, else the interpreter of the "
     "torchrun on PATH, else python3 on PATH)"},
    {"preload", &LaunchOptions::preload, kOursGroup,
     "Import these Python modules (e.g. torch) once per node in a zygote and fork every worker "
     "of a script, and every replacement, from it instead of starting a new interpreter"},
    {"health_check", &LaunchOptions::health_check, kOursGroup,
     "Before each rendezvous run this shell command: exit 0 is healthy, anything else keeps the "
     "node out (its last stderr line is the reason)"},
    {"health_check_timeout", &LaunchOptions::health_check_timeout, kOursGroup,
     "Seconds --health_check may run before it is killed (with its process group) and counts as "
     "unhealthy (default 60)"},
    {"health_paths", &LaunchOptions::health_paths, kOursGroup,
     "Directories (comma-separated) that must be readable, writable and hold --health_min_free_mb "
     "before the node joins; --log_dir is always checked"},
    {"health_min_free_mb", &LaunchOptions::health_min_free_mb, kOursGroup,
     "Free MiB --log_dir and each --health_paths entry must have (default 100)"},
    {"health_gpus", &LaunchOptions::health_gpus, kOursGroup,
     "GPUs NVML must see, each answering: auto (--nproc_per_node of them, or the node's GPUs at its "
     "first check if fewer, where NVML loads and CUDA_VISIBLE_DEVICES does not hide them all), a "
     "number, or 0 for no GPU check (default auto)"},
    {"health_store_rtt_ms", &LaunchOptions::health_store_rtt_ms, kOursGroup,
     "A store round trip slower than this many ms is unhealthy; 0: no bound (default 1000)"},
    {"health_retries", &LaunchOptions::health_retries, kOursGroup,
     "Failed health checks retried (backoff from --health_retry_interval, doubling up to 60 s) "
     "before the node gives up with exit 5 (default 5)"},
    {"health_retry_interval", &LaunchOptions::health_retry_interval, kOursGroup,
     "Seconds before an unhealthy node checks again, doubling each time (default 5)"},
    {"event_log", &LaunchOptions::event_log, kOursGroup,
     "Append one JSON line per lifecycle event (rendezvous, worker_start, worker_exit, "
     "restart, scale, failure, success, shutdown) to this file"},
    // Clusters without a scheduler (docs/deploy.md).
    {"hosts", &LaunchOptions::hosts, kOursGroup,
     "Start one agent per host over ssh (BatchMode, your ssh config): h1,h2 or h1:SLOTS,h2:SLOTS; "
     "the store runs here, reached at --local_addr (default: this hostname)"},
    {"hostfile", &LaunchOptions::hostfile, kOursGroup,
     "As --hosts, from a file of `HOST slots=N` lines (DeepSpeed/MPI format)"},
    {"numa_binding", &LaunchOptions::numa_binding, kLaunchGroup,
     "Bind each worker to CPUs near its GPU: node (its NUMA node), socket, exclusive (a "
     "disjoint share of the node's physical cores), core-complex (one L3 domain)"},
};

}  // namespace

std::span<const FlagSpec> launch_flags() { return kFlags; }

}  // namespace ddp::launcher
