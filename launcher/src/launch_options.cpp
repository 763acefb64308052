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
#include "launch_argv.hpp"
#include "launch_flags.hpp"
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

// Whether switch --`name`'s value turns it on: given on the command line, or a
// boolean that reads true (a file's true/false, an env var's 1/yes/on...).
// Any other text in an env var is refused, naming the variable, as a bad
// number there is (torchrun refuses it too: it reads the variable with int()):
// PET_NO_PYTHON=ture must not quietly run the program under python.
bool switch_on(const std::string& name, const SourcedValue& v) {
  if (v.kind == SourceKind::kFlag) return true;
  const auto on = parse_bool(v.value);
  if (!on)
    throw ConfigError("--" + name + ": '" + v.value + "' is not a boolean (" +
                      std::string(kBooleanSpellings) + ") (from " + v.source + ")");
  return *on;
}

// Switches read from the env beside the flags' layers: refused the same way.
void check_env_switches(const std::map<std::string, std::string>& env) {
  for (const char* name : {"DDP_SLURM", "DDP_GUARD_SERVER", "TORCHELASTIC_ENABLE_FILE_TIMER"}) {
    if (const auto it = env.find(name); it != env.end())
      parse_bool_or_throw(it->second, std::string("env ") + name);
  }
}

// CLI11 2.1 cannot name a positional that prefix_command() leaves alone.
class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "Usage: ddprun [OPTIONS] TRAINING_PROGRAM [args...]\n";
  }
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

  // Registers one row of launch_flags(), bound to its field of `o`.
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
    for (const auto& spec : launch_flags()) add(spec, o);
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
  check_env_switches(process_env);
  auto env = process_env;
  // Variables torchrun reads that stand for one of ours (when ours is unset):
  // the value is read as ours, and its source names the variable it came from.
  std::map<std::string, std::string> read_from;
  const auto alias = [&](const std::string& theirs, const std::string& ours) {
    const auto it = env.find(theirs);
    if (it == env.end() || env.count(ours) != 0) return;
    env.emplace(ours, it->second);
    read_from[ours] = theirs;
  };
  // torchrun runs scripts with $PYTHON_EXEC when set: it counts as DDP_PYTHON.
  if (auto exec = env.find("PYTHON_EXEC"); exec != env.end() && !exec->second.empty())
    alias("PYTHON_EXEC", "DDP_PYTHON");
  // torchrun's env spelling of --log_line_prefix_template.
  alias("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "PET_LOG_LINE_PREFIX_TEMPLATE");
  // torchrun 2.x's names of --stop_timeout's env fallback.
  for (const char* name : {"PET_SHUTDOWN_TIMEOUT", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"})
    alias(name, "PET_STOP_TIMEOUT");
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
      if (it == env.end()) continue;
      const auto from = read_from.find(var);
      return SourcedValue{it->second, "env " + (from == read_from.end() ? var : from->second)};
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
        const bool own_rendezvous =
            (standalone != above.end() && switch_on("standalone", standalone->second)) ||
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
    } else if (switch_on(name, v)) {
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
