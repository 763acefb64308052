// ddprun@.service's ExecStart run the way systemd would: the environment file
// parsed with systemd's rules (KEY=VALUE, the rest of the line is the value),
// Environment= applied first (the file wins), $DDPRUN_ARGS split on spaces.
#include <signal.h>

#include <catch2/catch.hpp>
#include <sstream>

#include "ops_support.hpp"

using namespace ddp::test;
using namespace std::chrono_literals;

namespace {

using Env = std::map<std::string, std::optional<std::string>>;

// Environment= lines of the unit, with %i replaced by `instance`.
void unit_environment(const std::string& unit, const std::string& instance, Env& env) {
  std::istringstream lines(read_file(fs::path(DDP_UNIT_TEST_DIR) / unit));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("Environment=", 0) != 0) continue;
    auto kv = line.substr(12);
    for (auto p = kv.find("%i"); p != std::string::npos; p = kv.find("%i")) kv.replace(p, 2, instance);
    env[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  }
}

void environment_file(const std::string& text, Env& env) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#' || line.find('=') == std::string::npos) continue;
    env[line.substr(0, line.find('='))] = line.substr(line.find('=') + 1);
  }
}

std::vector<std::string> expand(const std::vector<std::string>& argv, const Env& env) {
  std::vector<std::string> out;
  for (const auto& a : argv) {
    if (a.size() > 1 && a[0] == '$') {
      std::istringstream words(env.at(a.substr(1)).value_or(""));
      for (std::string w; words >> w;) out.push_back(w);
    } else {
      out.push_back(a);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("ddprun@ ExecStart runs a job from its environment file and stops cleanly on SIGTERM", "[ops][unit]") {
  TempDir dir;
  auto argv = unit_exec_start("ddprun@.service");
  REQUIRE(argv.size() == 2);
  REQUIRE(argv[0] == bin("ddprun").string());
  REQUIRE(argv[1] == "$DDPRUN_ARGS");

  Env env{{"FAKE_PID_FILE", (dir / "pids").string()}, {"FAKE_HANG", "1"}};
  unit_environment("ddprun@.service", "job42", env);
  environment_file("# as in /etc/ddprun/job42.conf\n"
                   "PET_STANDALONE=true\n"
                   "PET_NPROC_PER_NODE=2\n"
                   "PET_STOP_TIMEOUT=5\n"
                   "DDPRUN_ARGS=" + bin("fake_worker").string() + " --epochs 3\n",
                   env);
  CHECK(env["PET_RDZV_ID"] == "job42");
  Process agent(expand(argv, env), dir.path(), env, "ddprun");
  REQUIRE(wait_until([&] { return read_file(dir / "pids").find(" 1 start") != std::string::npos &&
                                  read_file(dir / "pids").find(" 0 start") != std::string::npos; },
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
