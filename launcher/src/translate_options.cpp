// LaunchOptions -> AgentConfig: every check a user can trip, each failing
// with one line that names the flag.
#include <netdb.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "ddp/agent/numa_binding.hpp"
#include "ddp/common/endpoint.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/common/parse.hpp"
#include "ddp/common/token_file.hpp"
#include "ddp/launcher/launch_options.hpp"
#include "ddp/rdzv/backend.hpp"
#include "ddp/rdzv/rendezvous.hpp"
#include "health_options.hpp"
#include "liveness_options.hpp"
#include "program.hpp"

namespace ddp::launcher {
namespace {

namespace fs = std::filesystem;

// torchrun's default port for c10d rendezvous when --rdzv_endpoint has none.
constexpr int kDefaultRdzvPort = 29400;

std::chrono::milliseconds parse_seconds(const std::string& key, const std::string& value) {
  const auto d = ddp::parse_duration(value, TimeUnit::kSeconds);
  if (d) return *d;
  const std::string head = "--rdzv_conf: " + key + "='" + value + "' ";
  if (duration_too_long(value, TimeUnit::kSeconds)) throw ConfigError(head + std::string(kDurationTooLong));
  throw ConfigError(head + "is not a number of seconds >= 0");
}

// A number CLI11 already parsed, quoted for a message ('1e+300').
std::string number_text(double v) {
  std::ostringstream out;
  out << v;
  return "'" + out.str() + "'";
}

bool parse_bool(const std::string& key, const std::string& value) {
  const auto b = ddp::parse_bool(value);
  if (!b)
    throw ConfigError("--rdzv_conf: " + key + "='" + value +
                      "' is not a boolean (true/false, 1/0, yes/no, on/off)");
  return *b;
}

void apply_rdzv_conf(const std::string& text, rdzv::RendezvousConfig& rc) {
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) {
      throw ConfigError("--rdzv_conf: '" + item + "' is not KEY=VALUE");
    }
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    if (key == "join_timeout" || key == "timeout") {
      rc.join_timeout = parse_seconds(key, value);
    } else if (key == "last_call_timeout") {
      rc.last_call_timeout = parse_seconds(key, value);
    } else if (key == "close_timeout") {
      rc.close_timeout = parse_seconds(key, value);
    } else if (key == "keep_alive_interval") {
      rc.keep_alive_interval = parse_seconds(key, value);
    } else if (key == "read_timeout") {
      // torchrun's store read timeout; our store client bounds each request
      // itself, so the value is validated and otherwise unused.
      parse_seconds(key, value);
    } else if (key == "keep_alive_max_attempt") {
      rc.keep_alive_max_attempt =
          parse_int_or_throw<int>(value, "--rdzv_conf: keep_alive_max_attempt", "a positive integer");
    } else if (key == "list_nodes_max") {
      // Above this many nodes a round of one --nproc_per_node reads no node list (docs/rendezvous.md).
      rc.list_nodes_max = parse_int_or_throw<int>(value, "--rdzv_conf: list_nodes_max", "an integer >= 0");
      if (rc.list_nodes_max < 0)
        throw ConfigError("--rdzv_conf: list_nodes_max='" + value + "' is not an integer >= 0");
    } else if (key == "is_host") {
      rc.is_host = parse_bool(key, value);
    } else if (key == "etcd_prefix") {
      if (value.empty()) throw ConfigError("--rdzv_conf: etcd_prefix must not be empty");
      rc.etcd.prefix = value;
    } else if (key == "protocol") {
      // torchrun's etcd backends: http or https.
      if (value != "http" && value != "https") {
        throw ConfigError("--rdzv_conf: protocol='" + value + "' is not http or https");
      }
      rc.etcd.https = value == "https";
    } else if (key == "torch_legacy_protocol") {
      // The torch version of the TCPStore clients without VALIDATE: 1.x and 2.0
      // share one op numbering, 2.1 has its own (same first bytes; docs/store-protocol.md).
      const auto legacy = store::parse_torch_legacy_protocol(value);
      if (!legacy) {
        throw ConfigError("--rdzv_conf: torch_legacy_protocol='" + value +
                          "' is not a torch version this setting knows; use " +
                          store::kTorchLegacyProtocolValues);
      }
      rc.torch_legacy_protocol = *legacy;
    } else if (key == "etcd_cacert" || key == "cacert" || key == "ca_cert") {
      rc.etcd.cacert = value;
    } else if (key == "etcd_cert" || key == "cert" || key == "ssl_cert") {
      rc.etcd.cert = value;
    } else if (key == "etcd_key" || key == "key" || key == "ssl_cert_key") {
      rc.etcd.key = value;
    } else if (key == "use_libuv") {
      // torchrun's TCPStore server flavour; ddprun's store is its own.
      parse_bool(key, value);
    } else {
      // torchrun hands unknown keys to the backend, which ignores what it does
      // not read: accepted too, with a warning in case of a typo.
      log::get("ddprun")->warn(
          "--rdzv_conf: key '{}' is not used by ddprun, ignored; known keys: join_timeout, "
          "last_call_timeout, close_timeout, keep_alive_interval, keep_alive_max_attempt, timeout, "
          "read_timeout, is_host, use_libuv, etcd_prefix, protocol, etcd_cacert, etcd_cert, etcd_key, "
          "torch_legacy_protocol, list_nodes_max",
          key);
    }
  }
}

std::pair<int, int> parse_nnodes(const std::string& text) {
  const auto colon = text.find(':');
  const std::string what = "N or MIN:MAX with 1 <= MIN <= MAX";
  int lo = 0;
  int hi = 0;
  if (colon == std::string::npos) {
    lo = hi = parse_int_or_throw<int>(text, "--nnodes", what);
  } else {
    lo = parse_int_or_throw<int>(std::string_view(text).substr(0, colon), "--nnodes", what);
    hi = parse_int_or_throw<int>(std::string_view(text).substr(colon + 1), "--nnodes", what);
  }
  if (lo < 1 || hi < lo) throw ConfigError("--nnodes: '" + text + "' is not " + what);
  return {lo, hi};
}

int resolve_nproc(const std::string& text, const HostInfo& host) {
  const auto gpus = [&] {
    if (host.gpu_count > 0 || !host.probe_gpus) return host.gpu_count;
    return host.probe_gpus().value_or(0);
  };
  if (text == "gpu") {
    const int n = gpus();
    if (n < 1) {
      throw ConfigError(
          "--nproc_per_node=gpu: no CUDA device visible (check nvidia driver and "
          "CUDA_VISIBLE_DEVICES), or give a number");
    }
    return n;
  }
  if (text == "cpu") return std::max(1, host.cpu_count);
  if (text == "auto") {
    const int n = gpus();
    return n > 0 ? n : std::max(1, host.cpu_count);
  }
  return parse_int_or_throw<int>(text, "--nproc_per_node", "a positive integer, gpu, cpu or auto", 1);
}

std::string random_run_id() {
  unsigned char b[16] = {};
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  urandom.read(reinterpret_cast<char*>(b), sizeof(b));
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);  // uuid4 layout, as torchrun's
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
  char out[40];
  std::snprintf(out, sizeof(out), "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return out;
}

void check_port(int port, const std::string& flag) {
  if (port < 1 || port > 65535) {
    throw ConfigError(flag + ": " + std::to_string(port) + " is out of range 1..65535");
  }
}

std::vector<int> parse_filter(const std::string& text, int nproc) {
  std::vector<int> out;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const int lr =
        parse_int_or_throw<int>(item, "--local_ranks_filter", "a comma-separated list of local ranks");
    if (lr < 0 || lr >= nproc) {
      throw ConfigError("--local_ranks_filter: local rank " + item + " does not exist with " +
                        std::to_string(nproc) + " workers per node");
    }
    out.push_back(lr);
  }
  return out;
}

// torchrun's --duplicate_std*_filters: comma-separated words, ",," a literal
// comma; empty words dropped (an empty list duplicates nothing).
std::vector<std::string> parse_line_filters(const std::string& text) {
  std::vector<std::string> out;
  std::string word;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i + 1 < text.size() && text[i] == ',' && text[i + 1] == ',') {
      word += ',';
      ++i;
    } else if (i == text.size() || text[i] == ',') {
      if (!word.empty()) out.push_back(word);
      word.clear();
    } else {
      word += text[i];
    }
  }
  return out;
}

// --preload's module names (dotted Python identifiers). Empty when the
// workers are no Python script (-m, an executable): they start normally.
std::vector<std::string> parse_preload(const std::string& text, bool python_script) {
  std::vector<std::string> out;
  std::stringstream items(text);
  std::string item;
  static const std::regex kModule(R"([A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*)");
  while (std::getline(items, item, ',')) {
    if (!std::regex_match(item, kModule)) {
      throw ConfigError("--preload: '" + item +
                        "' is not a Python module name; give a comma-separated list such as torch,numpy");
    }
    out.push_back(item);
  }
  if (!out.empty() && !python_script) {
    log::get("ddprun")->info(
        "--preload applies to Python scripts only: workers of -m modules and "
        "executables start normally");
    out.clear();
  }
  return out;
}

std::vector<int> parse_signals(const std::string& text) {
  static const std::map<std::string, int> kSignals = {
      {"SIGHUP", SIGHUP},   {"SIGINT", SIGINT},   {"SIGQUIT", SIGQUIT},
      {"SIGTERM", SIGTERM}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2},
      {"SIGALRM", SIGALRM}, {"SIGCONT", SIGCONT}, {"SIGXCPU", SIGXCPU}};
  std::vector<int> out;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    std::string name = item;
    for (auto& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (name.rfind("SIG", 0) != 0) name = "SIG" + name;
    const auto it = kSignals.find(name);
    if (it == kSignals.end()) {
      throw ConfigError("--signals_to_handle: '" + item +
                        "' is not a signal ddprun can handle; use names like SIGTERM,SIGUSR1 "
                        "(SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGCONT, "
                        "SIGXCPU)");
    }
    out.push_back(it->second);
  }
  return out;
}

// How the job restarts, re-forms, excludes nodes and stops its workers.
void translate_restarts(const LaunchOptions& o, agent::AgentConfig& cfg) {
  if (o.max_restarts < 0) {
    throw ConfigError("--max_restarts: " + std::to_string(o.max_restarts) + " must be >= 0");
  }
  cfg.max_restarts = o.max_restarts;
  if (o.on_failure == "restart") {
    cfg.on_failure = agent::OnFailure::kRestart;
  } else if (o.on_failure == "reform") {
    cfg.on_failure = agent::OnFailure::kReform;
  } else {
    throw ConfigError("--on_failure: '" + o.on_failure + "' is not restart or reform");
  }
  if (!o.max_no_progress_restarts.empty()) {
    cfg.max_no_progress_restarts = parse_int_or_throw<int>(
        o.max_no_progress_restarts, "--max_no_progress_restarts", "an integer >= 0", 0);
  }
  if (o.max_node_failures < 0) {
    throw ConfigError("--max_node_failures: " + std::to_string(o.max_node_failures) +
                      " must be >= 0 (0: never exclude a node)");
  }
  cfg.max_node_failures = o.max_node_failures;
  cfg.node_failure_window =
      parse_duration_or_throw(o.node_failure_window, TimeUnit::kSeconds, "--node_failure_window");
  if (cfg.node_failure_window.count() <= 0) {
    throw ConfigError("--node_failure_window: must be a number of seconds > 0");
  }
  if (const auto t = to_duration(o.stop_timeout_s, TimeUnit::kSeconds)) {
    cfg.stop_timeout = *t;
  } else if (o.stop_timeout_s > 0) {
    throw ConfigError("--stop_timeout: " + number_text(o.stop_timeout_s) + " " +
                      std::string(kDurationTooLong));
  } else {
    throw ConfigError("--stop_timeout: must be a number of seconds >= 0");
  }
}

// On etcd the node of group rank 0 hosts the workers' store and hands out
// its --local_addr as MASTER_ADDR. A name that does not resolve even here
// would leave every worker retrying it until torch's store timeout.
void check_local_addr_resolves(const std::string& local_addr, const std::string& backend) {
  if (local_addr.empty()) return;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(local_addr.c_str(), nullptr, &hints, &found);
  if (rc == 0) {
    ::freeaddrinfo(found);
    return;
  }
  throw ConfigError("--local_addr: '" + local_addr + "' does not resolve on this host (" +
                    ::gai_strerror(rc) + "); with --rdzv_backend=" + backend +
                    " the node of group rank 0 hosts the workers' store there: give this node's name or "
                    "address as the other nodes reach it");
}

// Which rendezvous backend, where, and whether this node hosts its store.
void choose_backend(const LaunchOptions& o, int min_nodes, int max_nodes, rdzv::RendezvousConfig& rc) {
  const std::string& backend = o.rdzv_backend;
  const auto kind = rdzv::parse_backend(backend);
  if (!o.standalone && (!kind || *kind == rdzv::Backend::kStandalone)) {
    // Standalone is --standalone, not a --rdzv_backend value.
    throw ConfigError("--rdzv_backend: unknown backend '" + backend + "'; use static, c10d (alias " +
                      "dynamic, ddp) or etcd (alias etcd-v2), or --standalone for one node");
  }
  if (o.standalone) {
    if (max_nodes != 1) {
      throw ConfigError("--standalone: runs a single node, but --nnodes=" + o.nnodes + "; drop one of them");
    }
    rc.backend = rdzv::backend_name(rdzv::Backend::kStandalone);
    rc.run_id = random_run_id();
    rc.is_host = true;
  } else if (*kind == rdzv::Backend::kStatic) {
    const bool fixed_port = o.master_port_given || !o.rdzv_endpoint.empty();
    if (max_nodes == 1 && !fixed_port) {
      // One node and no port asked for: a store on a free port serves the same
      // purpose as torchrun's fixed 29500 without colliding with another job.
      rc.backend = rdzv::backend_name(rdzv::Backend::kStandalone);
      rc.is_host = true;
    } else {
      if (min_nodes != max_nodes) {
        throw ConfigError("--nnodes: the static backend needs a fixed node count, got " + o.nnodes +
                          "; use --rdzv_backend=c10d for a range");
      }
      rc.backend = rdzv::backend_name(rdzv::Backend::kStatic);
      rc.endpoint = o.rdzv_endpoint.empty()
                        ? parse_endpoint(o.master_addr + ":" + std::to_string(o.master_port), "--master_addr")
                        : parse_endpoint(o.rdzv_endpoint, "--rdzv_endpoint", o.master_port);
      rc.node_rank = o.node_rank;
      // Node 0 hosts the store, unless --rdzv_conf is_host=false says that
      // one runs already (ddp-store, ddp-rendezvousd, the --hosts launcher).
      rc.is_host = rc.is_host.value_or(o.node_rank == 0);
    }
  } else if (*kind == rdzv::Backend::kC10d) {
    if (o.rdzv_endpoint.empty()) {
      throw ConfigError("--rdzv_endpoint: required with --rdzv_backend=" + backend +
                        " (HOST:PORT of ddp-rendezvousd or of the hosting agent)");
    }
    rc.backend = rdzv::backend_name(rdzv::Backend::kC10d);
    rc.endpoint = parse_endpoint(o.rdzv_endpoint, "--rdzv_endpoint", kDefaultRdzvPort);
  } else {
    if (o.rdzv_endpoint.empty()) {
      throw ConfigError("--rdzv_endpoint: required with --rdzv_backend=" + backend);
    }
    rc.backend = backend;  // etcd-v2 is an alias: the handler notes that it speaks v3
    rc.etcd.endpoints = rdzv::parse_etcd_endpoints(o.rdzv_endpoint, "--rdzv_endpoint");
    rc.endpoint = rc.etcd.endpoints.front();
    check_local_addr_resolves(o.local_addr, backend);
  }
}

void translate_rendezvous(const LaunchOptions& o, int min_nodes, int max_nodes, rdzv::RendezvousConfig& rc) {
  rc.min_nodes = min_nodes;
  rc.max_nodes = max_nodes;
  apply_rdzv_conf(o.rdzv_conf, rc);
  rdzv::check_keep_alive(rc);
  // A person watching gets a line a second while nodes are missing; a log
  // file gets one at once and then one every 30 s.
  rc.progress_interval = ::isatty(2) != 0 ? std::chrono::seconds(1) : std::chrono::seconds(30);
  // On a terminal (when ddprun's main enabled it) that line is a live status
  // line updated in place instead.
  rc.on_progress = [](const std::string& text) { return ddp::log::set_status_line(text); };
  rc.run_id = o.rdzv_id;
  choose_backend(o, min_nodes, max_nodes, rc);
}

// --max_node_failures against the backend and --max_restarts.
void check_node_failures(const LaunchOptions& o, const agent::AgentConfig& cfg) {
  const auto& rc = cfg.rendezvous;
  if (cfg.max_node_failures > 0 && rc.backend == rdzv::backend_name(rdzv::Backend::kStandalone)) {
    // The exclusion lives in the job's store, which here is this node's own
    // and ends with it: excluding the only node could only stop the job,
    // which --max_restarts already bounds.
    throw ConfigError(std::string("--max_node_failures: ") +
                      (o.standalone ? "--standalone" : "--nnodes=" + o.nnodes + " without --rdzv_endpoint") +
                      " runs one node with its own store, so excluding it could only end the job; drop "
                      "the flag (--max_restarts bounds the restarts), or run the job against "
                      "ddp-rendezvousd (--rdzv_backend=c10d) to keep the host out of later runs");
  }
  if (cfg.max_node_failures > cfg.max_restarts) {
    // A node is excluded instead of a restart; each of its failures before
    // the K-th spends one, so K > --max_restarts never gets there.
    log::get("ddprun")->warn(
        "--max_node_failures={}: the job stops when --max_restarts={} is spent, before a node can fail {} "
        "times, so no node will be excluded; raise --max_restarts to at least {}",
        cfg.max_node_failures, cfg.max_restarts, cfg.max_node_failures, cfg.max_node_failures);
  }
}

// Where the workers' output goes, and the signals passed on to them.
void translate_output(const LaunchOptions& o, agent::AgentConfig& cfg) {
  cfg.signals_to_handle = parse_signals(o.signals_to_handle);
  if (o.no_prefix) {
    cfg.line_prefix_template.clear();
  } else if (!o.log_line_prefix_template.empty()) {
    cfg.line_prefix_template = o.log_line_prefix_template;
  }
  cfg.redirects = agent::parse_std_spec(o.redirects, "--redirects");
  cfg.tee = agent::parse_std_spec(o.tee, "--tee");
  cfg.local_ranks_filter = parse_filter(o.local_ranks_filter, cfg.nproc_per_node);
  cfg.duplicate_stdout_filters = parse_line_filters(o.duplicate_stdout_filters);
  cfg.duplicate_stderr_filters = parse_line_filters(o.duplicate_stderr_filters);
  cfg.virtual_local_rank = o.virtual_local_rank;
  if (!o.log_dir.empty()) cfg.log_dir = fs::absolute(o.log_dir);
  if (!o.event_log.empty()) cfg.event_log = fs::absolute(o.event_log);
}

// The workers' command line: the program, --local_rank for a script that
// parses it, and --preload.
void translate_program(const LaunchOptions& o, const HostInfo& host, agent::AgentConfig& cfg) {
  const auto cmd = resolve_program(o, host.env);
  cfg.argv = cmd.argv;
  if (o.legacy_local_rank && o.no_legacy_local_rank) {
    throw ConfigError("--legacy_local_rank and --no_legacy_local_rank: give one of them");
  }
  bool legacy = o.legacy_local_rank;
  // A script run by python (not -m, not an executable) that parses
  // --local_rank would otherwise run as separate non-distributed copies.
  const bool python_script = !o.module && cmd.user_args_index >= 1 &&
                             cmd.argv[static_cast<std::size_t>(cmd.user_args_index)] == o.program.front();
  if (!legacy && !o.no_legacy_local_rank && python_script && script_defines_local_rank(o.program.front())) {
    legacy = true;
    log::get("ddprun")->info(
        "passing --local_rank=N to {}: it defines a --local_rank argument "
        "(torch.distributed.launch style); --no_legacy_local_rank to stop",
        o.program.front());
  }
  cfg.local_rank_arg_index = legacy ? cmd.user_args_index : -1;
  cfg.preload = parse_preload(o.preload, python_script && cmd.argv.size() >= 3 && cmd.argv[1] == "-u");
}

void translate_numa(const LaunchOptions& o, agent::AgentConfig& cfg) {
  cfg.numa_binding = agent::parse_numa_binding(o.numa_binding);
  if (cfg.numa_binding != agent::NumaBinding::kNone && !agent::numa_binding_supported()) {
    throw ConfigError("--numa_binding: ddprun was built without hwloc; install libhwloc-dev and rebuild");
  }
  if (cfg.numa_binding != agent::NumaBinding::kNone) agent::require_numa_binding();
}

}  // namespace

agent::AgentConfig translate_options(const LaunchOptions& o, const HostInfo& host) {
  agent::AgentConfig cfg;
  const auto [min_nodes, max_nodes] = parse_nnodes(o.nnodes);
  cfg.nproc_per_node = resolve_nproc(o.nproc_per_node, host);
  translate_restarts(o, cfg);
  cfg.liveness = translate_liveness(o);
  cfg.health = translate_health(o);
  if (o.role.empty()) throw ConfigError("--role: must not be empty");
  cfg.role = o.role;
  if (o.node_rank < 0 || o.node_rank >= max_nodes) {
    throw ConfigError("--node_rank: " + std::to_string(o.node_rank) + " must be in 0.." +
                      std::to_string(max_nodes - 1) + " for --nnodes=" + o.nnodes);
  }
  check_port(o.master_port, "--master_port");
  translate_rendezvous(o, min_nodes, max_nodes, cfg.rendezvous);
  check_node_failures(o, cfg);
  translate_output(o, cfg);
  if (!o.token_file.empty()) {
    cfg.rendezvous.token = read_token_file(o.token_file, "--token_file");
    cfg.token_file = fs::absolute(o.token_file);
  }
  translate_program(o, host, cfg);
  translate_numa(o, cfg);
  cfg.node.node_id = host.hostname + "_" + std::to_string(host.pid);
  cfg.node.host = o.local_addr.empty() ? host.hostname : o.local_addr;
  cfg.node.local_world_size = cfg.nproc_per_node;
  return cfg;
}

}  // namespace ddp::launcher
