// ddp-rendezvousd: load settings (flags > --config file > DDP_RENDEZVOUSD_* env),
// set up logging, run a StoreServer (and the metrics endpoint) until SIGTERM or
// SIGINT, tell systemd about it, map the outcome to an exit code (0 ok,
// 1 failure, including a stop that could not save the data dir, 2 usage/config,
// including a damaged data dir). A stop that takes longer than kStopTimeout
// ends the process anyway (exit 1).
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
#include "ddp/common/std_fds.hpp"
#include "ddp/common/token_file.hpp"
#include "ddp/store/store_server.hpp"
#include "descriptor_budget.hpp"
#include "metrics_http.hpp"
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

}  // namespace

int main(int argc, char** argv) {
  ddp::open_closed_std_fds();
  CLI::App app{
      "ddp-rendezvousd: rendezvous and key-value store daemon for ddprun jobs.\n"
      "Settings come from flags, then --config FILE (JSON object, keys as below with '_'),\n"
      "then DDP_RENDEZVOUSD_<KEY> env vars (DDP_RENDEZVOUSD_PORT), then defaults.\n"
      "Exit codes: 0 ok, 1 failure, 2 usage/config (bad flag, file, port in use)."};
  ddp::rendezvousd::DaemonConfig config;
  std::map<std::string, std::string> flag_values;
  for (const auto& s : config.settings()) {
    auto name = s.key;
    std::replace(name.begin(), name.end(), '_', '-');
    auto* opt = app.add_option("--" + name, flag_values[s.key], s.help);
    if (!s.value.empty()) opt->default_str(s.value);
    const bool path = name.ends_with("file") || name == "data-dir";
    opt->type_name(path                              ? "PATH"
                   : name == "host"                  ? "ADDR"
                   : name == "log-level"             ? "LEVEL"
                   : name == "torch-legacy-protocol" ? "VERSION"
                                                     : "INT");
  }
  std::string config_file, optional_config_file;
  bool print_config = false;
  bool recover_corrupt_log = false;
  app.add_option("--config", config_file, "JSON settings file; a missing file is an error")
      ->type_name("PATH");
  app.add_option("--config-if-exists", optional_config_file,
                 "like --config, but a missing file is skipped (for the systemd unit)")
      ->type_name("PATH");
  app.add_flag("--print-config", print_config, "print the effective settings and their sources, then exit 0");
  app.add_flag("--recover-corrupt-log", recover_corrupt_log,
               "start from a damaged --data-dir by keeping every intact record and dropping the damaged ones "
               "(reported in the log; the damaged files are kept as *.corrupt.<time>). Without it a damaged "
               "data dir is refused (exit 2)");
  app.set_version_flag("--version", std::string(kProgram) + " " + DDP_VERSION);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    std::cerr << kProgram << ": " << e.what() << "; see --help\n";
    return ddp::exit_code(ddp::ExitCode::kConfig);
  }

  ddp::rendezvousd::DaemonSettings settings;
  try {
    // Highest precedence first.
    std::map<std::string, std::string> given;
    for (const auto& s : config.settings()) {
      auto name = s.key;
      std::replace(name.begin(), name.end(), '_', '-');
      if (app.count("--" + name) > 0) given[s.key] = flag_values[s.key];
    }
    config.add_flags(given);
    if (!config_file.empty()) config.add_file(config_file);
    if (!optional_config_file.empty() && std::filesystem::exists(optional_config_file))
      config.add_file(optional_config_file);
    config.add_env();
    config.resolve();
    settings = config.to_settings();
    ddp::log::parse_level(settings.log_level, "--log-level");
    if (print_config) {
      config.print(std::cout);
      return 0;
    }
  } catch (const ddp::ConfigError& e) {
    std::cerr << kProgram << ": " << e.what() << "\n";
    return ddp::exit_code(ddp::ExitCode::kConfig);
  }

  try {
    ddp::log::setup(settings.log_level, kProgram);
#ifdef DDP_FAILPOINTS
    if (const char* spec = std::getenv("DDP_FAILPOINTS"); spec != nullptr && *spec != '\0') {
      ddp::store::server::failpoints::arm(spec);
      ddp::log::get("store.server")->warn("failpoints armed (test build) spec=\"{}\"", spec);
    }
#endif
    settings.server.recover_corrupt_log = recover_corrupt_log;
    ddp::rendezvousd::fit_max_connections(settings,
                                          ddp::rendezvousd::measure_descriptors(settings.metrics_port >= 0));
    if (!settings.token_file.empty())
      settings.server.token = ddp::read_token_file(settings.token_file, settings.token_file_source);

    // Blocked before any thread exists so that all inherit the mask and only
    // sigwait() below sees the signals.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);

    ddp::store::StoreServer server(settings.server);
    server.start();
    std::unique_ptr<ddp::rendezvousd::MetricsHttp> metrics;
    if (settings.metrics_port >= 0) {
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
      metrics = std::make_unique<ddp::rendezvousd::MetricsHttp>(
          settings.server.host, static_cast<std::uint16_t>(settings.metrics_port), std::move(sources));
      metrics->start();
    }
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

    int sig = 0;
    sigwait(&signals, &sig);
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
  } catch (const ddp::NetworkError& e) {
    // Port in use or an address we cannot bind: the user picks another --host/--port.
    std::cerr << kProgram << ": " << e.what() << "; pick another --host/--port\n";
    return ddp::exit_code(ddp::ExitCode::kConfig);
  } catch (const std::exception& e) {
    std::cerr << kProgram << ": " << e.what() << "\n";
    return ddp::exit_code_of(e);
  }
}
