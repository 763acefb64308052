// HealthCheck (agent/src/health_check.hpp) on its own: what each check says,
// and what the built-in checks cost on the launch path (a benchmark, printed).
#include "health_check.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>

#include "ddp/store/store_server.hpp"
#include "ddp/store/tcp_store.hpp"
#include "test_support.hpp"

using namespace ddp::agent;
using ddp::test::TempDir;

namespace {

struct LoopbackStore {
  LoopbackStore() {
    ddp::store::StoreServerOptions o;
    o.host = "127.0.0.1";
    server = std::make_unique<ddp::store::StoreServer>(o);
    server->start();
    ddp::store::TcpStoreOptions c;
    c.endpoint = ddp::Endpoint{"127.0.0.1", server->port()};
    c.connect_timeout = std::chrono::seconds(1);
    c.request_timeout = std::chrono::seconds(1);
    client = std::make_unique<ddp::store::TcpStore>(c);
  }
  ~LoopbackStore() {
    client.reset();
    server.reset();
  }
  std::unique_ptr<ddp::store::StoreServer> server;
  std::unique_ptr<ddp::store::TcpStore> client;
};

AgentConfig config() {
  AgentConfig c;
  c.rendezvous.run_id = "job";
  c.node.node_id = "n0";
  return c;
}

double mean_us(HealthCheck& check, ddp::store::Store* store, int n) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) REQUIRE(check.run(store).healthy());
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / n;
}

}  // namespace

TEST_CASE("the built-in health checks cost well under half a millisecond without GPUs or a command") {
  LoopbackStore store;
  TempDir dir;
  auto cfg = config();
  HealthCheck check(cfg);
  const auto first = std::chrono::steady_clock::now();
  check.run(store.client.get());  // the first run also tries to load NVML
  const double first_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - first).count();
  const double store_us = mean_us(check, store.client.get(), 500);
  cfg.log_dir = dir.path();
  const double log_dir_us = mean_us(check, store.client.get(), 500);
  std::printf(
      "health checks: first run %.1f us (NVML load tried), then %.1f us per run (store round trip), "
      "%.1f us with --log_dir\n",
      first_us, store_us, log_dir_us);
  // A bound far above the measurement: a benchmark, not a timing assertion.
  CHECK(log_dir_us < 5000);
}

TEST_CASE("check_dir names the flag, the path and what is wrong") {
  TempDir dir;
  CHECK(check_dir(dir.path(), 0, "--health_paths").empty());
  CHECK(check_dir(dir / "nope", 0, "--health_paths") ==
        "--health_paths " + (dir / "nope").string() +
            ": cannot open the directory: No such file or directory");
  ddp::test::write_file(dir / "file", "x");
  CHECK_THAT(check_dir(dir / "file", 0, "--log_dir"), Catch::Contains("Not a directory"));
  CHECK_THAT(check_dir(dir.path(), std::uint64_t{1} << 40, "--log_dir"),
             Catch::Contains("MiB free, below --health_min_free_mb=1099511627776"));
}

TEST_CASE("a health command's exit status decides, and its last stderr line is the reason") {
  auto cfg = config();
  cfg.health.command = "echo fine";
  HealthCheck ok(cfg);
  CHECK(ok.run(nullptr).healthy());

  cfg.health.command = "echo first >&2; printf 'last one\\n\\n' >&2; exit 7";
  HealthCheck bad(cfg);
  const auto v = bad.run(nullptr);
  CHECK(v.check == "command");
  CHECK(v.reason == "--health_check exited with 7: last one");

  cfg.health.command = "kill -9 $$";
  HealthCheck killed(cfg);
  CHECK(killed.run(nullptr).reason == "--health_check killed by signal 9");
}

TEST_CASE("a store that does not answer at all is left to the rendezvous, with a note") {
  LoopbackStore store;
  store.server.reset();
  auto cfg = config();
  cfg.health.gpus = 0;
  HealthCheck check(cfg);
  const auto v = check.run(store.client.get());
  CHECK(v.healthy());
  CHECK_THAT(v.note, Catch::StartsWith("no store check: the store does not answer ("));
}
