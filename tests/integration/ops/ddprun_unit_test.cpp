// ddprun@.service's ExecStart run the way systemd would: %i replaced by the
// instance, Environment= applied (the --config file overrides it), and the
// config file read from the test's dir instead of /etc/ddprun.
#include <signal.h>

#include <catch2/catch.hpp>
#include <regex>
#include <sstream>

#include "ops_support.hpp"

using namespace ddp::test;
using namespace std::chrono_literals;

namespace {

using Env = std::map<std::string, std::optional<std::string>>;

std::string specifiers(std::string s, const std::string& instance) {
  for (auto p = s.find("%i"); p != std::string::npos; p = s.find("%i")) s.replace(p, 2, instance);
  return s;
}

// Environment= lines of the unit.
void unit_environment(const std::string& unit, const std::string& instance, Env& env) {
  std::istringstream lines(read_file(fs::path(DDP_UNIT_TEST_DIR) / unit));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("Environment=", 0) != 0) continue;
    const auto kv = specifiers(line.substr(12), instance);
    env[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  }
}

}  // namespace

TEST_CASE("ddprun@ ExecStart runs the job of its config file and stops cleanly on SIGTERM", "[ops][unit]") {
  TempDir dir;
  auto argv = unit_exec_start("ddprun@.service");
  REQUIRE(argv.size() == 3);
  REQUIRE(argv[0] == bin("ddprun").string());
  REQUIRE(argv[1] == "--config");
  REQUIRE(argv[2] == "/etc/ddprun/%i.conf");
  argv[2] = (dir / specifiers("%i.conf", "job42")).string();

  write_file(argv[2],
             "{\n"
             "  \"standalone\": true,\n"
             "  \"nproc_per_node\": 2,\n"
             "  \"stop_timeout\": 5,\n"
             "  \"program\": \"" +
                 bin("fake_worker").string() +
                 "\",\n"
                 "  \"args\": [\"--epochs\", \"3\"]\n"
                 "}\n");
  Env env{{"FAKE_PID_FILE", (dir / "pids").string()}, {"FAKE_HANG", "1"}};
  unit_environment("ddprun@.service", "job42", env);
  CHECK(env["PET_RDZV_ID"] == "job42");

  auto config = run({argv[0], argv[1], argv[2], "--print-config"}, dir.path(), env);
  INFO(config.out << config.err);
  CHECK(config.code == 0);
  CHECK_THAT(config.out, Catch::Contains("job42") && Catch::Contains("env PET_RDZV_ID"));

  Process agent(argv, dir.path(), env, "ddprun");
  REQUIRE(wait_until(
      [&] {
        return read_file(dir / "pids").find(" 1 start") != std::string::npos &&
               read_file(dir / "pids").find(" 0 start") != std::string::npos;
      },
      30s));

  // systemctl stop with KillMode=mixed: SIGTERM to the agent only.
  agent.signal(SIGTERM);
  const auto code = agent.wait(30s);
  INFO(agent.err());
  REQUIRE(code.has_value());
  // 143 is listed in the unit's SuccessExitStatus=.
  CHECK(*code == 143);
  const auto unit = read_file(fs::path(DDP_UNIT_TEST_DIR) / "ddprun@.service");
  CHECK_THAT(unit, Catch::Contains("SuccessExitStatus=130 143"));
}

// docs/operations.md's Quick start checks a node's job with --print-config
// before starting ddprun@llama: what it shows must be what the unit runs
// (before: rdzv_id none, where the unit's Environment= gives llama).
TEST_CASE("the operations Quick start's --print-config shows the run id ddprun@llama runs with",
          "[ops][unit]") {
  TempDir dir;
  const auto doc = read_file(fs::path(DDP_SOURCE_DIR) / "docs/operations.md");
  const auto quick = doc.substr(doc.find("## Quick start"));
  const auto begin = quick.find("<<'END'\n");
  REQUIRE(begin != std::string::npos);
  const auto json_start = begin + std::string("<<'END'\n").size();
  write_file(dir / "llama.conf",
             quick.substr(json_start, quick.find("\nEND\n", json_start) - json_start + 1));
  std::smatch m;
  REQUIRE(std::regex_search(quick, m, std::regex("\n([^\n]*ddprun --config [^\n]*--print-config)")));
  // VAR=VALUE... ddprun ARGS..., up to a comment.
  std::istringstream words(m[1].str().substr(0, m[1].str().find(" #")));
  Env env;
  std::vector<std::string> argv;
  for (std::string w; words >> w;) {
    if (argv.empty() && w.find('=') != std::string::npos) {
      env[w.substr(0, w.find('='))] = w.substr(w.find('=') + 1);
    } else if (argv.empty()) {
      REQUIRE(w == "ddprun");
      argv.push_back(bin("ddprun").string());
    } else {
      argv.push_back(w == "/etc/ddprun/llama.conf" ? (dir / "llama.conf").string() : w);
    }
  }
  env.emplace("PET_RDZV_ID", std::nullopt);  // only what the line sets
  auto shown = run(argv, dir.path(), env);
  INFO(m[1].str() << "\n" << shown.out << shown.err);
  REQUIRE(shown.code == 0);
  Env unit;
  unit_environment("ddprun@.service", "llama", unit);
  REQUIRE(unit["PET_RDZV_ID"] == "llama");
  std::smatch row;
  REQUIRE(std::regex_search(shown.out, row, std::regex("\nrdzv_id +([^ ]+) ")));
  CHECK(row[1].str() == *unit["PET_RDZV_ID"]);
}
