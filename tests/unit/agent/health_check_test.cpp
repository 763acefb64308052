// HealthCheck (agent/src/health_check.hpp) on its own: what each check says.
// What the built-in checks cost on the launch path is ddp-bench health's.
#include "health_check.hpp"

#include <catch2/catch.hpp>
#include <chrono>

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

}  // namespace

TEST_CASE("the built-in health checks pass on a node without GPUs or a command, with a --log_dir too") {
  // What they cost is ddp-bench health's (docs/performance.md, "Health checks").
  LoopbackStore store;
  TempDir dir;
  auto cfg = config();
  HealthCheck check(cfg);
  CHECK(check.run(store.client.get()).healthy());  // the first run also tries to load NVML
  CHECK(check.run(store.client.get()).healthy());
  cfg.log_dir = dir.path();
  CHECK(check.run(store.client.get()).healthy());
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
