// Startup telemetry: per attempt, the agent reports rendezvous, spawn and
// first-step times in --event_log and in `ddp-store status` (docs/agent.md,
// "Startup times"). Workers report their first step with ddp-store, as any
// non-SDK worker can.
#include <signal.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;
using nlohmann::json;

namespace {

std::vector<json> events_named(const fs::path& path, const std::string& name) {
  std::vector<json> out;
  std::istringstream lines(read_file(path));
  std::string line;
  while (std::getline(lines, line)) {
    auto e = json::parse(line);
    if (e.at("event") == name) out.push_back(e);
  }
  return out;
}

// Attempt 0: rank 1 fails before its first step. Attempt 1: both ranks report
// their first step, then stay up.
constexpr const char* kWorker = R"(#!/bin/sh
if [ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exit 3; fi
"$DDP_STORE" --endpoint "$DDP_STORE_ENDPOINT" set "${DDP_STORE_PREFIX}ddp/first_step/$RANK" 1 >/dev/null
exec sleep 600
)";

}  // namespace

TEST_CASE("each attempt's rendezvous, spawn and first-step times reach the event log and ddp-store status") {
  TempDir dir;
  const LocalDaemon daemon(dir);
  const std::string& endpoint = daemon.endpoint;
  write_file(dir / "worker.sh", kWorker);
  const auto log = dir / "events.jsonl";
  Process agent(
      ddprun_argv({"--nnodes=1", "--nproc_per_node=2", "--rdzv_backend=c10d", "--rdzv_endpoint=" + endpoint,
                   "--rdzv_id=stepjob", "--max_restarts=1", "--stop_timeout=2", "--event_log", log.string(),
                   "--log_level=warn", "--no_python", "/bin/sh", (dir / "worker.sh").string()}),
      dir.path(), clean_env({{"DDP_STORE", bin("ddp-store").string()}}), "agent");

  REQUIRE(wait_until([&] { return !events_named(log, "first_step").empty(); }, std::chrono::seconds(30)));
  const auto startups = events_named(log, "startup");
  REQUIRE(startups.size() == 2);  // one per attempt
  for (std::size_t i = 0; i < startups.size(); ++i) {
    CHECK(startups[i].at("attempt") == i);
    CHECK(startups[i].at("rendezvous_s").get<double>() >= 0);
    CHECK(startups[i].at("spawn_s").get<double>() >= 0);
    // Written once every spawn has reported: a worker that took its first step
    // before the agent read the last report (a loaded machine) is in it already.
    const auto& first = startups[i].at("first_step_s");
    CHECK(
        (first.is_null() || (i == 1 && first.get<double>() >= startups[i].at("rendezvous_s").get<double>())));
  }
  // Attempt 0 failed before any first step; attempt 1's is every local worker's.
  const auto steps = events_named(log, "first_step");
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].at("attempt") == 1);
  CHECK(steps[0].at("first_step_ranks") == 2);
  CHECK(steps[0].at("first_step_s").get<double>() >= steps[0].at("rendezvous_s").get<double>());

  RunResult table;
  const bool shown = wait_for_status(
      dir, endpoint, "stepjob", table,
      [](const std::string& out) {
        return out.find(" step ") != std::string::npos && out.find(" step -") == std::string::npos;
      },
      std::chrono::seconds(10));
  INFO(table.out << table.err);
  CHECK(shown);
  CHECK_THAT(table.out, Catch::Contains("STARTUP"));
  CHECK_THAT(table.out, Catch::Contains("rdzv "));
  agent.signal(SIGTERM);
  CHECK(agent.wait(std::chrono::seconds(20)).has_value());
}
