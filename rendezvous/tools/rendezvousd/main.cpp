// ddp-rendezvousd: load settings (flags > --config file > DDP_RENDEZVOUSD_* env),
// set up logging, run a StoreServer (and the metrics endpoint) until SIGTERM or
// SIGINT, tell systemd about it, map the outcome to an exit code (0 ok,
// 1 failure, including a stop that could not save the data dir, 2 usage/config,
// including a damaged data dir). A stop that takes longer than kStopTimeout
// ends the process anyway (exit 1).
#include <malloc.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "daemon_config.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/exit_code.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/common/printable.hpp"
#include "ddp/common/std_fds.hpp"
#include "ddp/common/token_file.hpp"
#include "ddp/store/store_server.hpp"
#include "descriptor_budget.hpp"
#include "metrics_http.hpp"
#include "status_page.hpp"
#include "systemd_notifier.hpp"
#ifdef DDP_FAILPOINTS
#include "failpoints.hpp"
#endif

namespace {

constexpr const char* kProgram = "ddp-rendezvousd";
// SIGTERM ends the process within this time, even when the loop is wedged:
// a graceful stop takes at most the 2 s session grace period plus a snapshot.
constexpr std::chrono::seconds kStopTimeout{10};

// Ends the process if the graceful stop has not finished in time.
class StopDeadline {
 public:
  StopDeadline()
      : thread_([this] {
          std::unique_lock<std::mutex> lk(mu_);
          if (cv_.wait_for(lk, kStopTimeout, [this] { return done_; })) return;
          std::fprintf(stderr, "%s: graceful stop did not finish within %lld s; exiting\n", kProgram,
                       static_cast<long long>(kStopTimeout.count()));
          std::_Exit(1);
        }) {}
  ~StopDeadline() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// "<port>\n" via a temp file and rename, so a reader never sees a partial number.
void write_port_file(const std::string& flag, const std::string& path, std::uint16_t port) {
  const auto tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    if (!out.flush()) {
      std::remove(tmp.c_str());
      throw ddp::ConfigError(flag + " " + path + ": cannot write " + tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const auto err = ddp::errno_text(errno);
    std::remove(tmp.c_str());
    throw ddp::ConfigError(flag + " " + path + ": cannot rename " + tmp + ": " + err);
  }
}

// Removes the port files it was given unless release() ran: a start that fails
// half way leaves no file claiming a port nobody listens on.
struct PortFiles {
  std::vector<std::string> written;
  bool keep = false;
  ~PortFiles() {
    if (keep) return;
    for (const auto& p : written) std::remove(p.c_str());
  }
};

// The command line: a flag per setting of DaemonConfig, and the daemon's own.
struct Cli {
  CLI::App app{
      "ddp-rendezvousd: rendezvous and key-value store daemon for ddprun jobs.\n"
      "Settings come from flags, then --config FILE (JSON object, keys as below with '_'),\n"
      "then DDP_RENDEZVOUSD_<KEY> env vars (DDP_RENDEZVOUSD_PORT), then defaults.\n"
      "Exit codes: 0 ok, 1 failure, 2 usage/config (bad flag, file, port in use)."};
  std::map<std::string, std::string> flag_values;
  std::string config_file, optional_config_file;
  bool print_config = false;
  bool recover_corrupt_log = false;

  explicit Cli(const ddp::rendezvousd::DaemonConfig& config) {
    for (const auto& s : config.settings()) {
      auto* opt = app.add_option(flag_name(s.key), flag_values[s.key], s.help);
      if (!s.value.empty()) opt->default_str(s.value);
      const std::string name = flag_name(s.key).substr(2);
      const bool path = name.ends_with("file") || name == "data-dir";
      opt->type_name(path                              ? "PATH"
                     : name == "host"                  ? "ADDR"
                     : name == "log-level"             ? "LEVEL"
                     : name == "torch-legacy-protocol" ? "VERSION"
                     : name == "fsync"                 ? "always|never"
                                                       : "INT");
    }
    app.add_option("--config", config_file, "JSON settings file; a missing file is an error")
        ->type_name("PATH");
    app.add_option("--config-if-exists", optional_config_file,
                   "like --config, but a missing file is skipped (for the systemd unit)")
        ->type_name("PATH");
    app.add_flag("--print-config", print_config,
                 "print the effective settings and their sources, then exit 0");
    app.add_flag("--recover-corrupt-log", recover_corrupt_log,
                 "start from a damaged --data-dir by keeping every intact record and dropping the damaged "
                 "ones (reported in the log; the damaged files are kept as *.corrupt.<time>). Without it a "
                 "damaged data dir is refused (exit 2)");
    app.set_version_flag("--version", std::string(kProgram) + " " + DDP_VERSION);
  }

  // "--data-dir" for the setting "data_dir".
  static std::string flag_name(std::string key) {
    std::replace(key.begin(), key.end(), '_', '-');
    return "--" + key;
  }
};

// The settings from the flags given, then the config files, then the env.
ddp::rendezvousd::DaemonSettings load_settings(Cli& cli, ddp::rendezvousd::DaemonConfig& config) {
  // Highest precedence first.
  std::map<std::string, std::string> given;
  for (const auto& s : config.settings()) {
    if (cli.app.count(Cli::flag_name(s.key)) > 0) given[s.key] = cli.flag_values[s.key];
  }
  config.add_flags(given);
  if (!cli.config_file.empty()) config.add_file(cli.config_file);
  if (!cli.optional_config_file.empty() && std::filesystem::exists(cli.optional_config_file))
    config.add_file(cli.optional_config_file);
  config.add_env();
  config.resolve();
  auto settings = config.to_settings();
  ddp::log::parse_level(settings.log_level, "--log-level");
  return settings;
}

// Logging, the test build's failpoints, and what the server needs before it starts.
void prepare(ddp::rendezvousd::DaemonSettings& settings, bool recover_corrupt_log) {
  ddp::log::setup(settings.log_level, kProgram);
  if (!settings.log_file.empty()) ddp::log::log_to_file(settings.log_file, settings.log_file_source);
#ifdef DDP_FAILPOINTS
  if (const char* spec = std::getenv("DDP_FAILPOINTS"); spec != nullptr && *spec != '\0') {
    ddp::store::server::failpoints::arm(spec);
    ddp::log::get("store.server")->warn("failpoints armed (test build) spec=\"{}\"", spec);
  }
#endif
  settings.server.recover_corrupt_log = recover_corrupt_log;
  // A failed fsync of the log: stop (exit 1, nothing saved) rather than serve
  // state that may not be on disk; systemd restarts the daemon, which reads
  // back what the disk really holds.
  settings.server.on_fatal = [](const std::string&) { ::kill(::getpid(), SIGTERM); };
  ddp::rendezvousd::fit_max_connections(settings,
                                        ddp::rendezvousd::measure_descriptors(settings.metrics_port >= 0));
  if (!settings.token_file.empty())
    settings.server.token = ddp::read_token_file(settings.token_file, settings.token_file_source);
  // Every job's life in the log: formed, restarted and why, ended, reclaimed.
  settings.server.log_jobs = true;
}

// Blocked before any thread exists so that all inherit the mask and only
// sigwait() sees the signals.
sigset_t block_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);  // reopens --log-file (logrotate's postrotate)
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// The metrics endpoint: /metrics, /healthz, /readyz and the status page.
std::unique_ptr<ddp::rendezvousd::MetricsHttp> start_metrics(
    ddp::store::StoreServer& server, const ddp::rendezvousd::DaemonSettings& settings) {
  // stats() goes through the loop with a deadline: a wedged loop is a 503.
  auto degraded = [&server] {
    const auto s = server.stats();
    const auto it = s.find("degraded");
    return it != s.end() && it->second != 0;
  };
  ddp::rendezvousd::MetricsSources sources;
  sources.metrics = [&server] { return server.metrics(); };
  // Liveness: a full disk is no reason to restart (and drop every client).
  sources.health = [degraded]() -> std::string {
    if (degraded()) return "ok, degraded: the data dir refuses writes (disk full?); reads are served\n";
    return "ok\n";
  };
  // Readiness: writes would fail, so a load balancer should send no one.
  sources.ready = [degraded]() -> std::string {
    if (degraded())
      throw ddp::StoreError(
          "not ready, cannot persist: the data dir refuses writes (disk full?); reads, watches and "
          "keep-alives are served, writes answer INTERNAL");
    return "ok\n";
  };
  // The per-job series and the status page: a job listing read on the
  // loop in slices, rendered on the metrics port's own thread.
  sources.job_metrics = [&server] { return ddp::rendezvousd::render_job_metrics(server.jobs({})); };
  sources.page = [&server, listen = settings.server.host + ":" + std::to_string(server.port())](
                     const std::string& path, const std::string& query) {
    return ddp::rendezvousd::answer_page(server, listen, path, query);
  };
  sources.token = settings.server.token;
  auto metrics = std::make_unique<ddp::rendezvousd::MetricsHttp>(
      settings.server.host, static_cast<std::uint16_t>(settings.metrics_port), std::move(sources));
  metrics->start();
  return metrics;
}

// Waits for SIGTERM or SIGINT (returned), reopening the log file on SIGHUP.
int wait_for_stop(const sigset_t& signals) {
  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
    const auto error = ddp::log::reopen_log_file();
    if (error.empty()) {
      ddp::log::get("store.server")->info("received SIGHUP; log file reopened");
    } else {
      ddp::log::get("store.server")
          ->warn("received SIGHUP; cannot reopen the log file, still writing the old one: {}", error);
    }
  }
  return sig;
}

// Serves until stopped: 0, or 1 when the data dir could not be saved.
int serve(const ddp::rendezvousd::DaemonSettings& settings) {
  const sigset_t signals = block_signals();
  ddp::store::StoreServer server(settings.server);
  server.start();
  std::unique_ptr<ddp::rendezvousd::MetricsHttp> metrics;
  if (settings.metrics_port >= 0) metrics = start_metrics(server, settings);
  PortFiles files;
  if (!settings.metrics_port_file.empty()) {
    write_port_file("--metrics-port-file", settings.metrics_port_file, metrics->port());
    files.written.push_back(settings.metrics_port_file);
  }
  if (!settings.port_file.empty()) {
    write_port_file("--port-file", settings.port_file, server.port());
    files.written.push_back(settings.port_file);
  }
  files.keep = true;

  ddp::rendezvousd::SystemdNotifier notifier([&server] { return server.stats(); });
  notifier.ready(settings.server.host + ":" + std::to_string(server.port()));
  const int sig = wait_for_stop(signals);
  ddp::log::get("store.server")->info("received {}; stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  StopDeadline deadline;
  notifier.stopping();
  if (metrics) metrics->stop();
  server.stop();
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->flush(); });
  if (!server.saved()) {
    std::cerr << kProgram << ": stopped, but the data dir " << settings.server.data_dir
              << " could not be saved (see the log); the last writes may be lost\n";
    return ddp::exit_code(ddp::ExitCode::kFailed);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ddp::open_closed_std_fds();
  // Reply buffers and values of 256 KiB or more get pages of their own, given
  // back when freed. glibc's default threshold rises to the size of the last
  // large block freed, after which such buffers come from the heap and stay
  // in its RSS once freed: 100 watchers that never read then peaked at
  // 375 MiB under a 256 MiB reply budget; with the threshold fixed, 242 MiB.
  ::mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  ddp::rendezvousd::DaemonConfig config;
  Cli cli(config);
  try {
    cli.app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return cli.app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    std::cerr << kProgram << ": " << e.what() << "; see --help\n";
    return ddp::exit_code(ddp::ExitCode::kConfig);
  }

  ddp::rendezvousd::DaemonSettings settings;
  try {
    settings = load_settings(cli, config);
    if (cli.print_config) {
      config.print(std::cout);
      return 0;
    }
  } catch (const ddp::ConfigError& e) {
    std::cerr << kProgram << ": " << ddp::terminal_safe(e.what()) << "\n";
    return ddp::exit_code(ddp::ExitCode::kConfig);
  }

  try {
    prepare(settings, cli.recover_corrupt_log);
    return serve(settings);
  } catch (const ddp::NetworkError& e) {
    // Port in use or an address we cannot bind: the user picks another --host/--port.
    std::cerr << kProgram << ": " << e.what() << "; pick another --host/--port\n";
    return ddp::exit_code(ddp::ExitCode::kConfig);
  } catch (const std::exception& e) {
    std::cerr << kProgram << ": " << ddp::terminal_safe(e.what()) << "\n";
    return ddp::exit_code_of(e);
  }
}
