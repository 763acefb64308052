// --heartbeat_timeout, --section_timeouts, the auto knobs and the straggler
// flags: from the command line, PET_/DDP_ env and --print-config, into
// LivenessConfig; bad values.
#include "liveness_options.hpp"

#include <catch2/catch.hpp>

#include "ddp/common/error.hpp"
#include "ddp/launcher/launch_options.hpp"

using namespace ddp::launcher;
using namespace std::chrono_literals;

namespace {

LaunchOptions parse(std::vector<std::string> args, const std::map<std::string, std::string>& env = {}) {
  args.insert(args.begin(), "ddprun");
  args.push_back("train.py");
  auto out = parse_command_line(args, env);
  REQUIRE(out.kind == ParseOutcome::Kind::kRun);
  return out.options;
}

std::string error_of(std::vector<std::string> args) {
  try {
    translate_liveness(parse(std::move(args)));
  } catch (const ddp::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("heartbeat and section timeouts are off by default") {
  const auto c = translate_liveness(parse({}));
  CHECK_FALSE(c.heartbeats_on());
  CHECK_FALSE(c.sections_on());
  CHECK(c.auto_factor == 5.0);
  CHECK(c.auto_warmup == 10);
}

TEST_CASE("section timeouts take seconds, NAME=auto and a bare auto") {
  const auto c = translate_liveness(parse(
      {"--heartbeat_timeout=2.5", "--section-timeouts", "step=30, checkpoint=600,eval=auto,setup=0.25"}));
  CHECK(c.heartbeat_timeout == 2500ms);
  CHECK(c.section_timeouts.at("step") == 30s);
  CHECK(c.section_timeouts.at("checkpoint") == 600s);
  CHECK(c.section_timeouts.at("setup") == 250ms);
  CHECK(c.auto_sections.count("eval") == 1);
  CHECK_FALSE(c.sections_auto);
  const auto a = translate_liveness(parse({"--heartbeat_timeout=auto", "--section_timeouts=auto",
                                           "--auto_timeout_factor=3", "--auto_timeout_warmup=4"}));
  CHECK(a.heartbeat_auto);
  CHECK(a.sections_auto);
  CHECK(a.auto_factor == 3.0);
  CHECK(a.auto_warmup == 4);
}

TEST_CASE("liveness flags come from PET_ and DDP_ env too") {
  const auto c =
      translate_liveness(parse({}, {{"PET_HEARTBEAT_TIMEOUT", "7"}, {"DDP_SECTION_TIMEOUTS", "step=3"}}));
  CHECK(c.heartbeat_timeout == 7s);
  CHECK(c.section_timeouts.at("step") == 3s);
}

TEST_CASE("bad liveness values name their flag") {
  CHECK_THAT(error_of({"--heartbeat_timeout=soon"}), Catch::StartsWith("--heartbeat_timeout: 'soon'"));
  CHECK_THAT(error_of({"--heartbeat_timeout=-1"}), Catch::StartsWith("--heartbeat_timeout:"));
  CHECK_THAT(error_of({"--section_timeouts=step"}), Catch::StartsWith("--section_timeouts: 'step' is not"));
  CHECK_THAT(error_of({"--section_timeouts=step=0"}), Catch::StartsWith("--section_timeouts: step='0'"));
  CHECK_THAT(error_of({"--section_timeouts==5"}), Catch::StartsWith("--section_timeouts:"));
  CHECK_THAT(error_of({"--auto_timeout_factor=0.5"}), Catch::StartsWith("--auto_timeout_factor:"));
  CHECK_THAT(error_of({"--auto_timeout_warmup=0"}), Catch::StartsWith("--auto_timeout_warmup:"));
}

TEST_CASE(
    "a liveness timeout past the longest duration is refused saying so, and a huge auto factor is allowed") {
  CHECK_THAT(error_of({"--heartbeat_timeout=1e12"}),
             Catch::StartsWith("--heartbeat_timeout: '1e12' is longer than 1099511627 s"));
  CHECK_THAT(error_of({"--section_timeouts=step=1e300"}),
             Catch::StartsWith("--section_timeouts: step='1e300' is longer than 1099511627 s"));
  CHECK_THAT(error_of({"--heartbeat_timeout=soon"}),
             Catch::Equals("--heartbeat_timeout: 'soon' is not a number of seconds > 0 (or auto)"));
  // The learned timeout it gives is capped (heartbeat_policy_test).
  CHECK(translate_liveness(parse({"--auto_timeout_factor=1e300"})).auto_factor == 1e300);
}

TEST_CASE("stragglers are reported by default at 2x for 10 steps, and the straggler flags are read") {
  const auto d = translate_liveness(parse({}));
  CHECK(d.straggler_factor == 2.0);
  CHECK(d.straggler_steps == 10);
  CHECK(d.straggler_action == ddp::agent::LivenessConfig::StragglerAction::kReport);
  const auto c = translate_liveness(
      parse({"--straggler_factor=1.5", "--straggler-steps", "3", "--straggler_action=report"}));
  CHECK(c.straggler_factor == 1.5);
  CHECK(c.straggler_steps == 3);
  CHECK(translate_liveness(parse({"--straggler_factor=0"})).straggler_factor == 0);
  CHECK(translate_liveness(parse({"--straggler_action=restart"})).straggler_action ==
        ddp::agent::LivenessConfig::StragglerAction::kRestart);
  CHECK(translate_liveness(parse({}, {{"PET_STRAGGLER_STEPS", "4"}})).straggler_steps == 4);
}

TEST_CASE("straggler flags out of range are refused naming the flag") {
  CHECK_THAT(error_of({"--straggler_factor=1"}),
             Catch::Equals("--straggler_factor: must be 0 (off) or a number > 1 (default 2)"));
  CHECK_THAT(error_of({"--straggler_factor=-2"}), Catch::StartsWith("--straggler_factor:"));
  CHECK_THAT(error_of({"--straggler_steps=0"}), Catch::StartsWith("--straggler_steps: 0 must be >= 1"));
  CHECK_THAT(error_of({"--straggler_action=exclude"}),
             Catch::Equals("--straggler_action: 'exclude' is not report or restart"));
}
