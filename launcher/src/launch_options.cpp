// CLI11 wiring of ddprun's flags. Validation lives in translate_options.cpp so
// the same checks apply whichever way the options were filled.
#include "ddp/launcher/launch_options.hpp"

#include <CLI/CLI.hpp>

#include "ddp/common/error.hpp"

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
};

std::string names(const std::string& base) {
  std::string dashed = base;
  for (auto& c : dashed) {
    if (c == '_') c = '-';
  }
  return dashed == base ? "--" + base : "--" + base + ",--" + dashed;
}

std::string pet_name(const std::string& base) {
  std::string out = "PET_";
  for (char c : base) out += static_cast<char>(c == '-' ? '_' : std::toupper(static_cast<unsigned char>(c)));
  return out;
}

bool truthy(const std::string& v) {
  return v == "1" || v == "true" || v == "True" || v == "TRUE" || v == "yes" || v == "on";
}

// CLI11 2.1 cannot name a positional that prefix_command() leaves alone.
class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "Usage: ddprun [OPTIONS] TRAINING_PROGRAM [args...]\n";
  }
};

struct App {
  CLI::App app{"ddprun: launches and supervises distributed training workers (torchrun "
               "compatible)",
               "ddprun"};
  std::vector<EnvFlag> env_flags;
  bool version = false;

  template <typename T>
  void opt(const std::string& base, T& target, const std::string& help, const std::string& group,
           const std::string& shorthand = "") {
    auto* o = app.add_option((shorthand.empty() ? "" : shorthand + ",") + names(base), target, help);
    o->group(group);
    env_flags.push_back({o, pet_name(base), false});
  }

  void flag(const std::string& base, bool& target, const std::string& help,
            const std::string& group, const std::string& shorthand = "") {
    auto* o = app.add_flag((shorthand.empty() ? "" : shorthand + ",") + names(base), target, help);
    o->group(group);
    env_flags.push_back({o, pet_name(base), true});
  }

  explicit App(LaunchOptions& o) {
    const std::string node = "Worker/node size";
    const std::string rdzv = "Rendezvous";
    const std::string launch = "User-code launch";
    const std::string logs = "Logs";
    const std::string legacy = "Static rendezvous (torch.distributed.launch compatible)";
    const std::string ours = "ddprun";
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
        "128+N stopped by signal N.");

    opt("nnodes", o.nnodes, "Number of nodes, or the range of nodes in form MIN:MAX", node);
    opt("nproc_per_node", o.nproc_per_node,
        "Number of workers per node; supported values: [auto, cpu, gpu, int]", node);

    opt("rdzv_backend", o.rdzv_backend, "Rendezvous backend: static, c10d (alias ddp), etcd", rdzv);
    opt("rdzv_endpoint", o.rdzv_endpoint, "Rendezvous backend endpoint; usually in form HOST:PORT",
        rdzv);
    opt("rdzv_id", o.rdzv_id, "User-defined group id", rdzv);
    opt("rdzv_conf", o.rdzv_conf,
        "Additional rendezvous configuration (KEY1=VALUE1,KEY2=VALUE2,...): join_timeout, "
        "last_call_timeout, close_timeout, keep_alive_interval, keep_alive_max_attempt, timeout, "
        "read_timeout, is_host",
        rdzv);
    flag("standalone", o.standalone,
         "Start a local rendezvous store on a free port; for single-node, multi-worker jobs. "
         "--rdzv_backend, --rdzv_endpoint and --rdzv_id are then auto-assigned",
         rdzv);

    opt("max_restarts", o.max_restarts,
        "Maximum number of worker group restarts before failing", launch);
    opt("monitor_interval", o.monitor_interval,
        "Accepted for compatibility; ddprun reacts to worker exits as they happen", launch);
    opt("start_method", o.start_method, "Accepted for compatibility (spawn, fork, forkserver)",
        launch);
    app.get_option("--start_method")->check(CLI::IsMember({"spawn", "fork", "forkserver"}));
    opt("role", o.role, "User-defined role for the workers", launch);
    flag("module", o.module,
         "Interpret the program as a Python module, executing as `python -m`", launch, "-m");
    flag("no_python", o.no_python,
         "Execute the program directly instead of prepending `python3 -u`", launch);
    flag("run_path", o.run_path,
         "Run the program as a Python script path even without a .py suffix", launch);
    opt("local_addr", o.local_addr,
        "Address of this node as other nodes reach it (default: the hostname)", launch);

    opt("log_dir", o.log_dir,
        "Base directory for log files: <log_dir>/<rdzv_id>/attempt_<k>/<local_rank>/", logs);
    opt("redirects", o.redirects,
        "Redirect std streams into log files (e.g. -r 3 both streams of every worker; -r 0:1,1:2 "
        "stdout of local rank 0 and stderr of local rank 1)",
        logs, "-r");
    opt("tee", o.tee, "Tee std streams into log files and also to the console (format as -r)",
        logs, "-t");
    opt("local_ranks_filter", o.local_ranks_filter,
        "Only show the console output of these local ranks (e.g. 0,2)", logs);

    opt("node_rank", o.node_rank, "Rank of the node for multi-node distributed training", legacy);
    opt("master_addr", o.master_addr,
        "Address of the master node (rank 0); IPv6 as [::1]", legacy);
    auto* port = app.add_option(names("master_port"), o.master_port,
                                "Port on the master node (rank 0), default 29500");
    port->group(legacy);
    env_flags.push_back({port, "PET_MASTER_PORT", false});

    opt("stop_timeout", o.stop_timeout_s,
        "Seconds between SIGTERM and SIGKILL when stopping workers (default 30, as torchrun)",
        ours);
    flag("legacy_local_rank", o.legacy_local_rank,
         "Pass --local_rank=N to the program, the torch.distributed.launch way", ours);
    flag("use_env", o.use_env,
         "Accepted for torch.distributed.launch compatibility: the env always carries LOCAL_RANK",
         ours);
    opt("token_file", o.token_file,
        "File holding the store's auth token; workers get it as DDP_TOKEN_FILE", ours);
    opt("log_level", o.log_level, "ddprun's own log level: trace, debug, info, warn, error, off",
        ours);
    opt("python", o.python, "Interpreter for scripts and -m (default python3)", ours);
    app.add_flag("--version", version, "Print the version and exit")->group(ours);
  }
};

[[noreturn]] void rethrow_as_config_error(const CLI::ParseError& e) {
  std::string msg = e.what();
  if (const auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
  throw ConfigError(msg);
}

}  // namespace

ParseOutcome parse_command_line(const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env) {
  ParseOutcome out;
  std::vector<std::string> argv = args;
  for (int pass = 0; pass < 2; ++pass) {
    out.options = LaunchOptions{};
    App cli(out.options);
    // CLI11 wants the arguments reversed, without argv[0].
    std::vector<std::string> rev(argv.rbegin(), argv.rend());
    if (!rev.empty()) rev.pop_back();
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
    out.options.program = cli.app.remaining();
    out.options.master_port_given = cli.app.get_option("--master_port")->count() > 0;
    if (!out.options.program.empty() && out.options.program.front() == "--") {
      out.options.program.erase(out.options.program.begin());
    } else if (!out.options.program.empty() && out.options.program.front().size() > 1 &&
               out.options.program.front()[0] == '-') {
      throw ConfigError(out.options.program.front() +
                        ": unknown option; see ddprun --help (program arguments go after the "
                        "program)");
    }
    if (pass == 1) break;
    // Second pass only when a PET_* variable fills a flag the command line lacks.
    std::vector<std::string> extra;
    for (const auto& f : cli.env_flags) {
      auto it = env.find(f.env);
      if (it == env.end() || f.option->count() > 0) continue;
      const std::string flag = "--" + f.option->get_lnames().front();
      if (f.is_flag) {
        if (truthy(it->second)) extra.push_back(flag);
      } else {
        extra.push_back(flag + "=" + it->second);
      }
    }
    if (extra.empty()) break;
    std::vector<std::string> next{argv.empty() ? "ddprun" : argv.front()};
    next.insert(next.end(), extra.begin(), extra.end());
    next.insert(next.end(), argv.begin() + (argv.empty() ? 0 : 1), argv.end());
    argv = std::move(next);
  }
  return out;
}

}  // namespace ddp::launcher
