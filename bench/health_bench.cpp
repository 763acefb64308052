// ddp-bench health: what ddprun's built-in health checks (--health_checks,
// docs/agent.md) cost on the launch path of a node without GPUs or a
// command: the first run (which also tries to load NVML), then the mean of
// --runs runs against a store on 127.0.0.1 (its round trip), and with a
// --log_dir to check as well (docs/performance.md, "Health checks").
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "bench.hpp"
#include "bench_cli.hpp"
#include "ddp/store/store_server.hpp"
#include "ddp/store/tcp_store.hpp"
#include "health_check.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// The mean cost of one run in microseconds; -1 if a run found the node unhealthy.
double mean_us(ddp::agent::HealthCheck& check, ddp::store::Store* store, int runs) {
  const auto start = Clock::now();
  for (int i = 0; i < runs; ++i) {
    if (!check.run(store).healthy()) return -1;
  }
  return us_since(start) / runs;
}

int run(int argc, char** argv) {
  CLI::App app{"Cost of ddprun's built-in health checks per run, in microseconds"};
  int runs = 500;
  app.add_option("--runs", runs, "runs per measurement")->check(CLI::Range(1, 10'000'000));
  if (const auto code = ddp::bench::parse_flags(app, argc, argv)) return *code;

  ddp::store::StoreServerOptions so;
  so.host = "127.0.0.1";
  ddp::store::StoreServer server(so);
  server.start();
  ddp::store::TcpStoreOptions co;
  co.endpoint = ddp::Endpoint{"127.0.0.1", server.port()};
  ddp::store::TcpStore store(co);

  ddp::agent::AgentConfig cfg;
  cfg.rendezvous.run_id = "bench";
  cfg.node.node_id = "n0";
  ddp::agent::HealthCheck check(cfg);
  const auto first = Clock::now();
  check.run(&store);  // the first run also tries to load NVML
  const double first_us = us_since(first);
  const double store_us = mean_us(check, &store, runs);
  const auto dir =
      std::filesystem::temp_directory_path() / ("ddp-bench-health-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  cfg.log_dir = dir;
  const double log_dir_us = mean_us(check, &store, runs);
  std::filesystem::remove_all(dir);
  if (store_us < 0 || log_dir_us < 0) {
    std::fprintf(stderr, "ddp-bench health: a check found this node unhealthy\n");
    return 1;
  }
  std::printf("runs=%d first_us=%.1f per_run_us=%.1f per_run_log_dir_us=%.1f\n", runs, first_us, store_us,
              log_dir_us);
  return 0;
}

}  // namespace

DDP_BENCH_SUBCOMMAND("health", "cost of ddprun's built-in health checks per run", run);
