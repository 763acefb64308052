// The --health_* flags: defaults, values from the command line and DDP_ env
// into HealthConfig, and one line naming the flag for each bad value.
#include "health_options.hpp"

#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"
#include "ddp/launcher/launch_options.hpp"

using namespace ddp::launcher;
using namespace std::chrono_literals;

namespace {

ddp::agent::HealthConfig health(std::vector<std::string> args,
                                const std::map<std::string, std::string>& env = {}) {
  args.insert(args.begin(), "ddprun");
  args.push_back("train.py");
  auto out = parse_command_line(args, env);
  REQUIRE(out.kind == ParseOutcome::Kind::kRun);
  return translate_health(out.options);
}

}  // namespace

TEST_CASE("health checks default to the built-in ones with a bounded retry") {
  const auto c = health({});
  CHECK(c.command.empty());
  CHECK(c.command_timeout == 60s);
  CHECK(c.paths.empty());
  CHECK(c.min_free_mb == 100);
  CHECK(c.gpus == ddp::agent::HealthConfig::kAutoGpus);
  CHECK(c.max_store_rtt == 1000ms);
  CHECK(c.max_retries == 5);
  CHECK(c.retry_interval == 5s);
}

TEST_CASE("health flags fill HealthConfig from the command line and DDP_ env") {
  const auto c = health({"--health_check", "nvidia-smi -q >/dev/null", "--health-check-timeout=2.5",
                         "--health_paths", "/scratch, rel", "--health_min_free_mb=0", "--health_gpus=8",
                         "--health_store_rtt_ms=0", "--health_retries=0", "--health_retry_interval=0.01"});
  CHECK(c.command == "nvidia-smi -q >/dev/null");
  CHECK(c.command_timeout == 2500ms);
  REQUIRE(c.paths.size() == 2);
  CHECK(c.paths[0] == "/scratch");
  CHECK(c.paths[1] == std::filesystem::absolute("rel"));
  CHECK(c.min_free_mb == 0);
  CHECK(c.gpus == 8);
  CHECK(c.max_store_rtt == 0ms);
  CHECK(c.max_retries == 0);
  CHECK(c.retry_interval == 10ms);
  CHECK(health({}, {{"DDP_HEALTH_CHECK", "/opt/check.sh"}}).command == "/opt/check.sh");
}

TEST_CASE("a bad health flag is one line naming it") {
  const auto error_of = [](std::vector<std::string> args) -> std::string {
    try {
      health(std::move(args));
    } catch (const ddp::ConfigError& e) {
      return e.what();
    }
    return "";
  };
  CHECK(error_of({"--health_check_timeout=-1"}) ==
        "--health_check_timeout: '-1' is not a number of seconds > 0");
  CHECK(error_of({"--health_retry_interval=0"}) ==
        "--health_retry_interval: '0' is not a number of seconds > 0");
  CHECK(error_of({"--health_retries=1001"}) == "--health_retries: '1001' is not an integer in 0..1000");
  CHECK(error_of({"--health_gpus=-2"}) == "--health_gpus: '-2' is not auto or a number of GPUs >= 0");
  CHECK(error_of({"--health_min_free_mb=-1"}) == "--health_min_free_mb: '-1' is not a number of MiB >= 0");
  CHECK(error_of({"--health_store_rtt_ms=1e3"}) ==
        "--health_store_rtt_ms: '1e3' is not a number of milliseconds >= 0 (0: no bound)");
  CHECK_THAT(error_of({"--health_check_timeout=1e12"}), Catch::Contains("is longer than 1099511627 s"));
}
