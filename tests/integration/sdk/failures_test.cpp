// What a user sees when things go wrong: timeouts, bad env, error files.
#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>

#include "sdk_job.hpp"

using namespace ddp::test;

namespace {

std::string worker() { return bin("ddp_sdk_test_worker").string(); }

RunResult run_with_env(std::map<std::string, std::optional<std::string>> env) {
  TempDir dir;
  for (const char* var : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DDP_STORE_ENDPOINT",
                          "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_ERROR_FILE"}) {
    if (!env.count(var)) env[var] = std::nullopt;
  }
  return run({bin("ddp-example-train").string()}, dir.path(), env, std::chrono::seconds(30));
}

}  // namespace

TEST_CASE("a collective where one rank never arrives times out naming the rank and the op") {
  // A small all-reduce (Gloo's bcube, whose waits take the connections'
  // timeout) and one over 1 MiB (Gloo's ring): both keep the op's own timeout.
  const std::string size = GENERATE(as<std::string>{}, "", "--ring");
  SdkJob job;
  std::vector<std::string> argv{worker(), "missing-peer"};
  if (!size.empty()) argv.push_back(size);
  const auto results = job.run(argv, 2);
  INFO(size << "\n" << describe(results));
  CHECK(results[0].code == 0);
  CHECK(results[1].code == 0);
  CHECK_THAT(results[0].out,
             Catch::Contains("caught TimeoutError: all_reduce timed out after 1000 ms on rank 0 of 2"));
  CHECK_THAT(results[0].out,
             Catch::Contains("then BackendError: barrier on rank 0: the process group is unusable"));
}

TEST_CASE("a rank that never joins the group is named when the group times out") {
  SdkJob job;
  // World size 2, but only rank 0 is started: SdkJob starts `world` ranks, so run rank 0 by hand.
  Process p({worker(), "join-timeout"}, job.dir().path(),
            {{"RANK", "0"},
             {"WORLD_SIZE", "2"},
             {"DDP_STORE_ENDPOINT", job.endpoint()},
             {"DDP_STORE_PREFIX", "jt/"},
             {"TORCHELASTIC_ERROR_FILE", std::nullopt}});
  REQUIRE(p.wait(std::chrono::seconds(30)) == 1);
  CHECK_THAT(p.err(),
             Catch::Contains("timed out after 1000 ms waiting for 1 rank(s) of 2 to join (missing: 1)"));
}

TEST_CASE("a missing RANK gives one line naming the variable and exit code 2") {
  const auto r = run_with_env({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
  check_one_line_failure(r, 2, Catch::Contains("RANK is not set"));
}

TEST_CASE("RANK >= WORLD_SIZE gives one line naming both variables") {
  const auto r = run_with_env(
      {{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
  check_one_line_failure(r, 2, Catch::Contains("RANK=4 is out of range for WORLD_SIZE=4"));
}

TEST_CASE("a non-numeric WORLD_SIZE names the variable and the value") {
  const auto r = run_with_env(
      {{"RANK", "0"}, {"WORLD_SIZE", "two"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("WORLD_SIZE='two' is not a number"));
}

TEST_CASE("an unreachable MASTER_ADDR fails after the bounded retry naming host:port") {
  const int port = free_port();
  const auto r = run_with_env({{"RANK", "1"},
                               {"WORLD_SIZE", "2"},
                               {"MASTER_ADDR", "127.0.0.1"},
                               {"MASTER_PORT", std::to_string(port)},
                               {"DDP_INIT_TIMEOUT", "1"}});
  check_one_line_failure(
      r, 1,
      Catch::Contains("cannot reach the store at MASTER_ADDR:MASTER_PORT=127.0.0.1:" + std::to_string(port)));
}

TEST_CASE("a DDP_INIT_TIMEOUT too long to keep is refused naming the variable and the longest accepted") {
  const auto r = run_with_env({{"RANK", "1"},
                               {"WORLD_SIZE", "2"},
                               {"MASTER_ADDR", "127.0.0.1"},
                               {"MASTER_PORT", std::to_string(free_port())},
                               {"DDP_INIT_TIMEOUT", "1e12"}});
  check_one_line_failure(r, 2, Catch::Contains("DDP_INIT_TIMEOUT: '1e12' is longer than 1099511627 s"));
}

TEST_CASE("an uncaught exception is written to the error file in torch's format") {
  TempDir dir;
  const auto file = dir / "error.json";
  const auto before =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const auto r = run({worker(), "throw"}, dir.path(), {{"TORCHELASTIC_ERROR_FILE", file.string()}});
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("boom from the test worker"));
  const auto j = nlohmann::json::parse(read_file(file));
  CHECK(j["message"]["message"] == "std::runtime_error: boom from the test worker");
  CHECK_THAT(j["message"]["extraInfo"]["py_callstack"].get<std::string>(), Catch::StartsWith("#0 "));
  CHECK(std::stoll(j["message"]["extraInfo"]["timestamp"].get<std::string>()) >= before);
}

TEST_CASE("a ConfigError exits with 2 and is recorded with its type") {
  TempDir dir;
  const auto file = dir / "error.json";
  const auto r = run({worker(), "config"}, dir.path(), {{"TORCHELASTIC_ERROR_FILE", file.string()}});
  CHECK(r.code == 2);
  CHECK(nlohmann::json::parse(read_file(file))["message"]["message"] == "ddp::ConfigError: --flag is wrong");
}

TEST_CASE("SIGSEGV is written to the error file and the process dies of the signal") {
  TempDir dir;
  const auto file = dir / "error.json";
  Process p({worker(), "segv"}, dir.path(), {{"TORCHELASTIC_ERROR_FILE", file.string()}});
  CHECK(p.wait(std::chrono::seconds(30)) == 128 + 11);
  const auto j = nlohmann::json::parse(read_file(file));
  CHECK(j["message"]["message"] == "Signal 11 (SIGSEGV) received by PID " + std::to_string(p.pid()));
  CHECK_FALSE(j["message"]["extraInfo"]["py_callstack"].get<std::string>().empty());
  CHECK_FALSE(j["message"]["extraInfo"]["timestamp"].get<std::string>().empty());
}

TEST_CASE("SIGABRT is recorded too") {
  TempDir dir;
  const auto file = dir / "error.json";
  Process p({worker(), "abort"}, dir.path(), {{"TORCHELASTIC_ERROR_FILE", file.string()}});
  CHECK(p.wait(std::chrono::seconds(30)) == 128 + 6);
  CHECK_THAT(read_file(file), Catch::Contains("Signal 6 (SIGABRT)"));
}
