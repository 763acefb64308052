// CLI11 wiring of ddprun's flags. Validation lives in translate_options.cpp so
// the same checks apply whichever way the options were filled.
#include "ddp/launcher/launch_options.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iomanip>
#include <optional>
#include <sstream>
#include <type_traits>
#include <variant>

#include "config_file.hpp"
#include "ddp/common/config_sources.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/parse.hpp"
#include "slurm_env.hpp"

#ifndef DDP_VERSION
#define DDP_VERSION "0.0.0"
#endif

namespace ddp::launcher {
namespace {

// torchrun's PET_<FLAG> fallbacks: the env var applies only when the flag is
// not on the command line.
struct EnvFlag {
  CLI::Option* option;
  std::string env;
  bool is_flag;
  std::string ddp_env;  // DDP_<FLAG>, for ddprun's own flags only
  // A switch's variable: CLI11 keeps no default string for flags, so
  // --print-config reads the value here.
  const bool* switch_value = nullptr;
};

std::string names(const std::string& base) {
  std::string dashed = base;
  for (auto& c : dashed) {
    if (c == '_') c = '-';
  }
  return dashed == base ? "--" + base : "--" + base + ",--" + dashed;
}

std::string pet_name(const std::string& base, const std::string& prefix = "PET_") {
  std::string out = prefix;
  for (char c : base) out += static_cast<char>(c == '-' ? '_' : std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// Whether a switch's value turns it on: given on the command line, or a
// boolean that reads true (a file's true/false, an env var's 1/yes/on...; any
// other text in an env var leaves it off, as under torchrun).
bool switch_on(const SourcedValue& v) {
  return v.kind == SourceKind::kFlag || parse_bool(v.value).value_or(false);
}

// CLI11 2.1 cannot name a positional that prefix_command() leaves alone.
class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "Usage: ddprun [OPTIONS] TRAINING_PROGRAM [args...]\n";
  }
};

// The groups of ddprun --help.
constexpr const char* kNodeGroup = "Worker/node size";
constexpr const char* kRdzvGroup = "Rendezvous";
constexpr const char* kLaunchGroup = "User-code launch";
constexpr const char* kLogsGroup = "Logs";
constexpr const char* kLegacyGroup = "Static rendezvous (torch.distributed.launch compatible)";
constexpr const char* kOursGroup = "ddprun";  // ddprun's own flags: they also read DDP_<FLAG>

// One flag that a config file and PET_<FLAG> can also set: its long name (the
// `-` spelling comes with it), the option it fills (a bool one is a switch),
// its group and help, and optionally a short name and a second long name.
struct FlagSpec {
  const char* name;
  std::variant<std::string LaunchOptions::*, int LaunchOptions::*, double LaunchOptions::*,
               bool LaunchOptions::*>
      field;
  const char* group;
  const char* help;
  const char* shorthand = "";
  const char* alias = "";
};

// In --help and --print-config order.
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
    // Bad nodes kept out (docs/agent.md, "Bad nodes kept out").
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

// CLI11's own conversion error ("Could not convert: --x = y") says neither
// what was wanted nor where the value came from: these run first, and accept
// exactly what CLI11's conversion does.
template <typename T>
CLI::Validator converts_to(const char* what) {
  return CLI::Validator(
      [what](std::string& text) {
        T value{};
        return CLI::detail::lexical_cast(text, value) ? std::string() : "'" + text + "' is not " + what;
      },
      "");
}
const CLI::Validator kInteger = converts_to<int>("an integer");
const CLI::Validator kNumber = converts_to<double>("a number");

struct App {
  CLI::App app{
      "ddprun: launches and supervises distributed training workers (torchrun "
      "compatible)",
      "ddprun"};
  std::vector<EnvFlag> env_flags;
  bool version = false;

  // Registers one row of kFlags, bound to its field of `o`.
  void add(const FlagSpec& spec, LaunchOptions& o) {
    std::string spelled = names(spec.name);
    if (*spec.shorthand != '\0') spelled = std::string(spec.shorthand) + "," + spelled;
    if (*spec.alias != '\0') spelled += "," + names(spec.alias);
    const std::string ddp_env = std::string_view(spec.group) == kOursGroup ? pet_name(spec.name, "DDP_") : "";
    std::visit(
        [&](auto member) {
          auto& target = o.*member;
          if constexpr (std::is_same_v<std::remove_reference_t<decltype(target)>, bool>) {
            auto* opt = app.add_flag(spelled, target, spec.help)->group(spec.group);
            env_flags.push_back({opt, pet_name(spec.name), true, ddp_env, &target});
          } else {
            auto* opt = app.add_option(spelled, target, spec.help)->group(spec.group);
            if constexpr (std::is_same_v<std::remove_reference_t<decltype(target)>, int>)
              opt->check(kInteger);
            if constexpr (std::is_same_v<std::remove_reference_t<decltype(target)>, double>)
              opt->check(kNumber);
            env_flags.push_back({opt, pet_name(spec.name), false, ddp_env});
          }
        },
        spec.field);
  }

  // capture_values: record each bound variable's current value as the option's
  // default string, which is how --print-config reads the effective values.
  explicit App(LaunchOptions& o, bool capture_values = false) {
    if (capture_values) app.option_defaults()->always_capture_default();
    // argparse (torchrun) keeps the last of a repeated flag: wrappers that add
    // a default before the user's own flags rely on it.
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.set_help_flag("-h,--help", "Print this help and exit");
    app.formatter(std::make_shared<UsageFormatter>());
    app.prefix_command();  // the program and everything after it pass through untouched
    app.footer(
        "Positional:\n"
        "  TRAINING_PROGRAM [args...]  A .py script runs as `python3 -u script.py args`; with -m\n"
        "                              `python3 -u -m module args`; an executable (or any program\n"
        "                              with --no_python) runs directly.\n\n"
        "Every flag also has a `-` spelling (--nproc-per-node) and a PET_<FLAG> env fallback\n"
        "(PET_NPROC_PER_NODE). Exit codes: 0 ok, 1 workers failed, 2 usage/config, 3 rendezvous,\n"
        "4 no progress (--max_no_progress_restarts), 5 node unhealthy (--health_retries),\n"
        "6 node excluded (--max_node_failures), 128+N stopped by signal N.\n\n"
        "--config FILE takes a JSON object of long flag names (either spelling) to values, plus\n"
        "\"program\" and \"args\": the command line overrides the file, which overrides PET_* /\n"
        "DDP_* env, which overrides values derived from a Slurm job's env. --print-config shows\n"
        "every effective value and where it came from.");
    for (const auto& spec : kFlags) add(spec, o);
    app.get_option("--start_method")->check(CLI::IsMember({"spawn", "fork", "forkserver"}));
    app.add_option(names("config"), o.config,
                   "JSON config file of flag values (also PET_CONFIG / DDP_CONFIG)")
        ->group(kOursGroup);
    app.add_flag(names("print_config"), o.print_config,
                 "Print every effective option and its source (default, env, file, flag), then "
                 "exit without launching")
        ->group(kOursGroup);
    app.add_flag("--version", version, "Print the version and exit")->group(kOursGroup);
    app.add_option(names("print_completion"), o.print_completion,
                   "Print a shell completion script for ddprun (bash, zsh, tcsh) and exit")
        ->check(CLI::IsMember({"bash", "zsh", "tcsh"}))
        ->group(kOursGroup);
  }
};

// "--flag: ..." from a value the environment, a config file or Slurm gave:
// the message says which.
std::string naming_source(std::string message, const std::map<std::string, std::string>& sources) {
  const auto colon = message.find(':');
  if (message.rfind("--", 0) != 0 || colon == std::string::npos) return message;
  const auto it = sources.find(message.substr(2, colon - 2));
  if (it == sources.end() || it->second == "flag") return message;
  return message + " (from " + it->second + ")";
}

[[noreturn]] void rethrow_as_config_error(const CLI::ParseError& e) {
  std::string msg = e.what();
  if (const auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
  throw ConfigError(msg);
}

const CLI::Option* find_long(const CLI::App& app, const std::string& name, bool prefix) {
  std::vector<const CLI::Option*> found;
  std::string all;
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& l : o->get_lnames()) {
      if ((prefix ? l.rfind(name, 0) != 0 : l != name) || (!found.empty() && found.back() == o)) {
        continue;
      }
      all += (all.empty() ? "--" : ", --") + o->get_lnames().front();
      found.push_back(o);
    }
  }
  if (found.size() > 1) throw ConfigError("--" + name + ": ambiguous option, could be " + all);
  return found.empty() ? nullptr : found.front();
}

// argparse (torchrun's parser) takes any unambiguous prefix of a long option:
// --nproc for --nproc_per_node, --nnode=1. Rewrites those to the full name, up
// to the program, whose arguments are left alone. Each rewrite, as typed and
// as rewritten, goes to `expanded` when given.
std::vector<std::string> expand_prefixes(
    const CLI::App& app, std::vector<std::string> argv,
    std::vector<std::pair<std::string, std::string>>* expanded = nullptr) {
  for (std::size_t i = 1; i < argv.size(); ++i) {
    std::string& a = argv[i];
    if (a == "--" || a.size() < 2 || a[0] != '-') break;  // the program starts here
    const CLI::Option* opt = nullptr;
    bool inline_value = false;
    if (a.rfind("--", 0) == 0) {
      const auto eq = a.find('=');
      const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      inline_value = eq != std::string::npos;
      opt = find_long(app, name, false);
      if (opt == nullptr && !name.empty() && (opt = find_long(app, name, true)) != nullptr) {
        const std::string typed = a;
        a = "--" + opt->get_lnames().front() + (inline_value ? a.substr(eq) : "");
        if (expanded != nullptr) expanded->emplace_back(typed, a);
      }
    } else {
      for (const CLI::Option* o : app.get_options()) {
        for (const auto& sn : o->get_snames()) {
          if (a.size() >= 2 && a.substr(1, 1) == sn) opt = o;
        }
      }
      inline_value = a.size() > 2;
    }
    // An option's value in the next argument is not the program.
    if (opt != nullptr && opt->get_type_size() > 0 && !inline_value) ++i;
  }
  return argv;
}

// Warnings for abbreviations that are easy to type by mistake: torchrun's
// workers take --local_rank, and given to the launcher it is a prefix of
// --local_ranks_filter, which then hides every other rank's output (argparse
// reads it the same way).
std::vector<std::string> abbreviation_warnings(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, std::string>> expanded;
  expand_prefixes(app, args, &expanded);
  std::vector<std::string> out;
  for (const auto& [typed, full] : expanded) {
    if (full.rfind("--local_ranks_filter", 0) != 0) continue;
    out.push_back(typed + " is read as " + full +
                  " (an abbreviation): only those local ranks' output is shown; write --local_ranks_filter "
                  "in full, or put --local_rank after the program for the program to read");
  }
  return out;
}

// A completion script for `shell` (bash, zsh, tcsh): ddprun's long flags, then
// files for the program. zsh uses bash's through bashcompinit.
std::string completion_script(const CLI::App& app, const std::string& shell) {
  std::string words;
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& l : o->get_lnames()) words += (words.empty() ? "--" : " --") + l;
  }
  if (shell == "tcsh") return "complete ddprun 'c/--/(" + words + ")/' 'p/*/f/'\n";
  std::string out;
  if (shell == "zsh") out += "autoload -U +X bashcompinit && bashcompinit\n";
  out +=
      "_ddprun() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]}\n"
      "  if [[ $cur == -* ]]; then\n"
      "    COMPREPLY=($(compgen -W \"" +
      words +
      "\" -- \"$cur\"))\n"
      "  else\n"
      "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
      "  fi\n"
      "}\n"
      "complete -o filenames -F _ddprun ddprun\n";
  return out;
}

// Parses argv with CLI11 into `o`; help/version end the parse early.
std::optional<ParseOutcome> parse_into(App& cli, const std::vector<std::string>& given) {
  const std::vector<std::string> argv = expand_prefixes(cli.app, given);
  // CLI11 wants the arguments reversed, without argv[0].
  std::vector<std::string> rev(argv.rbegin(), argv.rend());
  if (!rev.empty()) rev.pop_back();
  ParseOutcome out;
  try {
    cli.app.parse(rev);
  } catch (const CLI::CallForHelp&) {
    out.kind = ParseOutcome::Kind::kHelp;
    out.text = cli.app.help();
    return out;
  } catch (const CLI::ParseError& e) {
    rethrow_as_config_error(e);
  }
  if (cli.version) {
    out.kind = ParseOutcome::Kind::kVersion;
    out.text = std::string("ddprun ") + DDP_VERSION + "\n";
    return out;
  }
  if (const std::string shell = cli.app.get_option("--print_completion")->as<std::string>(); !shell.empty()) {
    out.kind = ParseOutcome::Kind::kHelp;
    out.text = completion_script(cli.app, shell);
    return out;
  }
  return std::nullopt;
}

std::vector<std::string> program_of(const CLI::App& app) {
  std::vector<std::string> program = app.remaining();
  if (!program.empty() && program.front() == "--") {
    program.erase(program.begin());
  } else if (!program.empty() && program.front().size() > 1 && program.front()[0] == '-') {
    throw ConfigError(program.front() +
                      ": unknown option; see ddprun --help (program arguments go after the "
                      "program)");
  }
  return program;
}

// Where the config file comes from: --config, else PET_CONFIG / DDP_CONFIG.
std::optional<ConfigFile> load_config(const LaunchOptions& cl,
                                      const std::map<std::string, std::string>& env) {
  std::string path = cl.config;
  for (const char* name : {"PET_CONFIG", "DDP_CONFIG"}) {
    if (!path.empty()) break;
    if (auto it = env.find(name); it != env.end()) path = it->second;
  }
  if (path.empty()) return std::nullopt;
  return load_config_file(path);
}

const EnvFlag* find_flag(const App& cli, const std::string& name) {
  for (const auto& f : cli.env_flags) {
    for (const auto& l : f.option->get_lnames()) {
      if (l == name) return &f;
    }
  }
  return nullptr;
}

void check_keys(const App& cli, const ConfigFile& file) {
  for (const auto& [name, v] : file.values) {
    const std::string at = file.where(v) + ": key '" + v.key + "'";
    if (name == "program") {
      if (v.type != ConfigValue::Type::kString) throw ConfigError(at + " must be a string");
    } else if (name == "args") {
      if (v.type != ConfigValue::Type::kStringList) {
        throw ConfigError(at + " must be a list of strings");
      }
      if (file.values.count("program") == 0) {
        throw ConfigError(at + " needs \"program\" in the same file");
      }
    } else if (name == "config" || name == "print_config") {
      throw ConfigError(at + " is only accepted on the command line");
    } else if (const EnvFlag* f = find_flag(cli, name); f == nullptr) {
      throw ConfigError(at +
                        " is not a ddprun option; keys are the long flag names of "
                        "ddprun --help, plus \"program\" and \"args\"");
    } else if (v.type == ConfigValue::Type::kStringList) {
      throw ConfigError(at + " takes a single value, not a list");
    } else if (f->is_flag && v.type != ConfigValue::Type::kBool) {
      throw ConfigError(at + " is a switch: use true or false");
    }
  }
}

std::string render_config(const LaunchOptions& effective, const std::map<std::string, std::string>& sources,
                          const std::string& program_source) {
  LaunchOptions copy = effective;
  App printer(copy, /*capture_values=*/true);
  std::ostringstream out;
  const auto row = [&out](const std::string& name, const std::string& value, const std::string& source) {
    out << std::left << std::setw(20) << name << " " << std::setw(24) << value << " " << source << "\n";
  };
  row("OPTION", "VALUE", "SOURCE");
  for (const auto& f : printer.env_flags) {
    const std::string name = f.option->get_lnames().front();
    std::string value = f.option->get_default_str();
    if (f.switch_value != nullptr) value = *f.switch_value ? "true" : "false";
    if (value.empty()) value = "\"\"";
    const auto it = sources.find(name);
    row(name, value, it == sources.end() ? "default" : it->second);
  }
  std::string program;
  for (const auto& a : effective.program) program += (program.empty() ? "" : " ") + a;
  row("program", program.empty() ? "\"\"" : program, program_source);
  return out.str();
}

}  // namespace

ParseOutcome parse_command_line(const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& process_env) {
  // torchrun runs scripts with $PYTHON_EXEC when set: it counts as DDP_PYTHON.
  auto env = process_env;
  if (auto exec = env.find("PYTHON_EXEC"); exec != env.end() && !exec->second.empty()) {
    env.emplace("DDP_PYTHON", exec->second);
  }
  // torchrun's env spelling of --log_line_prefix_template.
  if (auto t = env.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"); t != env.end()) {
    env.emplace("PET_LOG_LINE_PREFIX_TEMPLATE", t->second);
  }
  // torchrun 2.x's names of --stop_timeout's env fallback.
  for (const char* name : {"PET_SHUTDOWN_TIMEOUT", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"}) {
    if (auto t = env.find(name); t != env.end()) env.emplace("PET_STOP_TIMEOUT", t->second);
  }
  // First the command line alone: it says which flags are set there and names
  // the config file.
  LaunchOptions cl;
  App first(cl);
  if (auto early = parse_into(first, args)) return *early;
  const std::vector<std::string> cl_program = program_of(first.app);
  std::vector<std::string> warnings = abbreviation_warnings(first.app, args);
  for (const CLI::Option* o : first.app.get_options()) {
    if (o->get_expected_min() > 0 && o->count() > 1) {  // not a flag: --standalone twice is no news
      warnings.push_back("--" + o->get_lnames().front() + " given " + std::to_string(o->count()) +
                         " times: the last one, " + o->as<std::string>() + ", is used");
    }
  }
  const auto file = load_config(cl, env);
  if (file) check_keys(first, *file);

  // Then the lower layers become extra arguments in front of the command
  // line's, each flag taken from the highest source that sets it.
  std::vector<std::string> names;
  for (const auto& f : first.env_flags) names.push_back(f.option->get_lnames().front());
  const auto flag_of = [&first](const std::string& name) { return find_flag(first, name); };
  ConfigSources layers;
  layers.add(SourceKind::kFlag, [&](const std::string& name) -> std::optional<SourcedValue> {
    if (flag_of(name)->option->count() == 0) return std::nullopt;
    return SourcedValue{"", "flag"};  // parsed again below, from the command line itself
  });
  if (file) {
    layers.add(SourceKind::kFile, [&file](const std::string& name) -> std::optional<SourcedValue> {
      const auto it = file->values.find(name);
      if (it == file->values.end()) return std::nullopt;
      return SourcedValue{it->second.text, "file " + file->where(it->second)};
    });
  }
  layers.add(SourceKind::kEnv, [&](const std::string& name) -> std::optional<SourcedValue> {
    const EnvFlag* f = flag_of(name);
    for (const std::string& var : {f->env, f->ddp_env}) {
      auto it = var.empty() ? env.end() : env.find(var);
      if (it != env.end()) return SourcedValue{it->second, "env " + var};
    }
    return std::nullopt;
  });
  // Slurm: inside an allocation its env fills what the sources above left
  // unset (only the workers per node when --standalone or --hosts sets the
  // rendezvous).
  std::map<std::string, std::string> slurm;
  layers.add(
      SourceKind::kScheduler,
      [&slurm](const std::string& name) -> std::optional<SourcedValue> {
        const auto it = slurm.find(name);
        if (it == slurm.end()) return std::nullopt;
        return SourcedValue{it->second, "slurm"};
      },
      [&](const std::map<std::string, SourcedValue>& above) {
        std::map<std::string, std::string> set_above;
        for (const auto& [name, v] : above) set_above[name] = v.source;
        const auto standalone = above.find("standalone");
        const bool own_rendezvous = (standalone != above.end() && switch_on(standalone->second)) ||
                                    above.count("hosts") != 0 || above.count("hostfile") != 0;
        slurm = slurm_option_values(env, set_above, own_rendezvous);
      });

  std::map<std::string, std::string> sources;
  std::vector<std::string> extra;
  for (const auto& [name, v] : layers.resolve(names)) {
    sources[name] = v.source;
    if (v.kind == SourceKind::kFlag) continue;
    if (!flag_of(name)->is_flag) {
      extra.push_back("--" + name + "=" + v.value);
    } else if (switch_on(v)) {
      extra.push_back("--" + name);
    }
  }

  ParseOutcome out;
  std::vector<std::string> argv{args.empty() ? "ddprun" : args.front()};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), args.begin() + (args.empty() ? 0 : 1), args.end());
  // The same parser again, cleared and bound to fresh defaults: building one
  // costs more than a parse (CLI11 checks each option it adds against all
  // those added before).
  first.app.clear();
  cl = LaunchOptions{};
  try {
    if (auto early = parse_into(first, argv)) return *early;
  } catch (const ConfigError& e) {
    throw ConfigError(naming_source(e.what(), sources));
  }
  out.options = std::move(cl);
  out.options.master_port_given = first.app.get_option("--master_port")->count() > 0;
  out.warnings = std::move(warnings);
  out.options.config = file ? file->path : "";

  std::string program_source = "none";
  if (!cl_program.empty()) {
    out.options.program = cl_program;
    program_source = "flag";
  } else if (file && file->values.count("program") != 0) {
    const ConfigValue& p = file->values.at("program");
    out.options.program = {p.text};
    if (auto a = file->values.find("args"); a != file->values.end()) {
      out.options.program.insert(out.options.program.end(), a->second.list.begin(), a->second.list.end());
    }
    program_source = "file " + file->where(p);
  }

  if (out.options.print_config) {
    out.kind = ParseOutcome::Kind::kPrintConfig;
    out.text = render_config(out.options, sources, program_source);
  }
  return out;
}

}  // namespace ddp::launcher
