// Elastic behaviour of `ddprun --rdzv_backend=c10d` with several real agents on
// 127.0.0.1 and a real ddp-rendezvousd: success, failure fan-out, scale up,
// scale down on kill -9, and the join-timeout message. Workers are fake_worker;
// each agent gets its own directory, env-dump dir and pid file.
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using ddp::test::bin;
using ddp::test::Process;
using ddp::test::read_file;
using ddp::test::TempDir;
using ddp::test::wait_until;

namespace {

using Env = std::map<std::string, std::optional<std::string>>;

// A ddp-rendezvousd on a free port of 127.0.0.1.
struct Daemon {
  explicit Daemon(const TempDir& dir)
      : proc({bin("ddp-rendezvousd").string(), "--host", "127.0.0.1", "--port", "0", "--port-file",
              (dir / "daemon.port").string(), "--log-level", "warn"},
             dir.path(), {}, "daemon"),
        port(ddp::test::wait_for_port_file(dir / "daemon.port")) {}
  Process proc;
  int port;
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port); }
};

// One ddprun agent with its own directory; workers dump their env per rank.
struct Agent {
  Agent(const TempDir& dir, const std::string& name, const Daemon& d, const std::string& nnodes, int nproc,
        const std::string& conf, Env env, int max_restarts = 3)
      : home(dir / name) {
    fs::create_directories(home / "env");
    env["FAKE_ENV_DUMP"] = (home / "env").string();
    env["FAKE_PID_FILE"] = (home / "pids").string();
    env["PET_NNODES"] = std::nullopt;
    env["PET_NPROC_PER_NODE"] = std::nullopt;
    env["PET_STANDALONE"] = std::nullopt;
    proc = std::make_unique<Process>(
        std::vector<std::string>{bin("ddprun").string(), "--nnodes=" + nnodes,
                                 "--nproc_per_node=" + std::to_string(nproc), "--rdzv_backend=c10d",
                                 "--rdzv_endpoint=" + d.endpoint(), "--rdzv_id=job", "--rdzv_conf=" + conf,
                                 "--max_restarts=" + std::to_string(max_restarts), "--log_level=info",
                                 bin("fake_worker").string()},
        home, env, name);
  }
  fs::path home;
  std::unique_ptr<Process> proc;

  std::map<std::string, std::string> worker_env(int rank) const {
    std::map<std::string, std::string> out;
    std::istringstream lines(read_file(home / "env" / ("rank_" + std::to_string(rank) + ".env")));
    std::string line;
    while (std::getline(lines, line)) {
      auto eq = line.find('=');
      if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return out;
  }
  // Ranks whose latest env dump says WORLD_SIZE == world.
  std::set<int> ranks_in_world(int world) const {
    std::set<int> out;
    if (!fs::exists(home / "env")) return out;
    for (const auto& e : fs::directory_iterator(home / "env")) {
      const auto name = e.path().filename().string();
      if (name.rfind("rank_", 0) != 0) continue;
      const int rank = std::stoi(name.substr(5));
      auto env = worker_env(rank);
      if (env["WORLD_SIZE"] == std::to_string(world)) out.insert(rank);
    }
    return out;
  }
  std::vector<pid_t> started() const {
    std::vector<pid_t> out;
    std::istringstream lines(read_file(home / "pids"));
    std::string line;
    while (std::getline(lines, line)) {
      if (line.find(" start ") != std::string::npos) out.push_back(std::stoi(line));
    }
    return out;
  }
};

// Fast timeouts so a test takes seconds; keep-alive window 0.6 s.
const std::string kConf = "last_call_timeout=0.5,keep_alive_interval=0.2,keep_alive_max_attempt=3,join_timeout=30";

bool all_dead(const std::vector<pid_t>& pids) {
  for (auto p : pids) {
    if (ddp::test::pid_alive(p)) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("elastic: two agents form one world, finish at different times, and both exit 0") {
  TempDir dir;
  Daemon d(dir);
  Agent a(dir, "a", d, "2:2", 2, kConf, {});
  Agent b(dir, "b", d, "2:2", 2, kConf, {{"FAKE_SLEEP_MS", "1500"}});  // b's workers finish later
  REQUIRE(a.proc->wait(60s) == std::optional<int>(0));
  REQUIRE(b.proc->wait(60s) == std::optional<int>(0));
  std::set<int> ranks;
  for (const auto* ag : {&a, &b}) {
    for (int r : ag->ranks_in_world(4)) ranks.insert(r);
  }
  CHECK(ranks == std::set<int>{0, 1, 2, 3});
  // Finishing early is not a failure: nobody re-formed or restarted.
  CHECK(a.proc->err().find("round event") == std::string::npos);
  CHECK(b.proc->err().find("round event") == std::string::npos);
  CHECK(a.started().size() == 2);
  CHECK(b.started().size() == 2);
}

TEST_CASE("elastic: a worker failure on one node stops every node's workers and all re-form") {
  TempDir dir;
  Daemon d(dir);
  // a's workers run long in round 0 (restart 0) and briefly afterwards.
  Agent a(dir, "a", d, "2:2", 2, kConf, {{"FAKE_SLEEP_MS", "2500"}});
  Agent b(dir, "b", d, "2:2", 2, kConf, {{"FAKE_FAIL_ON_RESTART_BELOW", "1"}, {"FAKE_SLEEP_MS", "300"}});
  REQUIRE(wait_until([&] { return a.started().size() == 2; }, 30s));
  const auto first = a.started();
  // b's workers fail at ~0.3 s; a's (still sleeping) must be stopped through the
  // failure key, long before their 2.5 s are up.
  REQUIRE(wait_until([&] { return all_dead(first); }, 2s));
  REQUIRE(a.proc->wait(60s) == std::optional<int>(0));
  REQUIRE(b.proc->wait(60s) == std::optional<int>(0));
  CHECK(a.proc->err().find("restart requested") != std::string::npos);
  CHECK(a.started().size() == 4);  // two rounds of two workers
  CHECK(a.worker_env(a.ranks_in_world(4).empty() ? 0 : *a.ranks_in_world(4).begin())["TORCHELASTIC_RESTART_COUNT"] == "1");
}

TEST_CASE("elastic: a new agent makes a running job scale up without spending a restart") {
  TempDir dir;
  Daemon d(dir);
  // max_restarts=0: spending a restart would end the job with exit 1.
  Agent a(dir, "a", d, "1:3", 1, kConf, {{"FAKE_HANG", "1"}}, 0);
  REQUIRE(wait_until([&] { return a.ranks_in_world(1).count(0) == 1; }, 30s));
  Agent b(dir, "b", d, "1:3", 1, kConf, {{"FAKE_HANG", "1"}}, 0);
  REQUIRE(wait_until([&] { return a.ranks_in_world(2).size() == 1 && b.ranks_in_world(2).size() == 1; }, 30s));
  CHECK(a.proc->running());
  CHECK(a.proc->err().find("nodes waiting") != std::string::npos);
  for (const auto* ag : {&a, &b}) {
    auto rank = *ag->ranks_in_world(2).begin();
    CHECK(ag->worker_env(rank)["TORCHELASTIC_RESTART_COUNT"] == "0");
  }
  a.proc->signal(SIGTERM);
  b.proc->signal(SIGTERM);
  CHECK(a.proc->wait(30s) == std::optional<int>(128 + SIGTERM));
  CHECK(b.proc->wait(30s).has_value());
}

TEST_CASE("elastic: kill -9 of one agent makes the others re-form within the keep-alive window") {
  TempDir dir;
  Daemon d(dir);
  Agent a(dir, "a", d, "2:3", 1, kConf, {{"FAKE_HANG", "1"}});
  Agent b(dir, "b", d, "2:3", 1, kConf, {{"FAKE_HANG", "1"}});
  Agent c(dir, "c", d, "2:3", 1, kConf, {{"FAKE_HANG", "1"}});
  REQUIRE(wait_until([&] {
    return a.ranks_in_world(3).size() + b.ranks_in_world(3).size() + c.ranks_in_world(3).size() == 3;
  }, 30s));
  const auto a_first = a.started();
  const auto killed_at = std::chrono::steady_clock::now();
  c.proc->signal(SIGKILL);
  REQUIRE(wait_until([&] { return all_dead(a_first); }, 5s));
  const auto stopped_after = std::chrono::steady_clock::now() - killed_at;
  INFO("a's workers stopped " << std::chrono::duration_cast<std::chrono::milliseconds>(stopped_after).count()
                              << " ms after kill -9 of c");
  CHECK(stopped_after < 3s);  // window 0.6 s + stop grace; default window is 15 s
  REQUIRE(wait_until([&] { return a.ranks_in_world(2).size() == 1 && b.ranks_in_world(2).size() == 1; }, 30s));
  CHECK(a.proc->err().find("membership changed") != std::string::npos);
  a.proc->signal(SIGTERM);
  b.proc->signal(SIGTERM);
  CHECK(a.proc->wait(30s).has_value());
  CHECK(b.proc->wait(30s).has_value());
}

TEST_CASE("elastic: too few nodes time out with exit 3 naming who joined and how many are missing") {
  TempDir dir;
  Daemon d(dir);
  Agent a(dir, "a", d, "3:3", 2, "join_timeout=2,keep_alive_interval=0.2", {});
  // While it waits, an operator sees the node with ddp-store.
  REQUIRE(wait_until([&] {
    auto r = ddp::test::run({bin("ddp-store").string(), "--endpoint", d.endpoint(), "list", "/job/rdzv/"},
                            dir.path());
    return r.out.find("\"nproc\":2") != std::string::npos;
  }, 10s));
  REQUIRE(a.proc->wait(30s) == std::optional<int>(3));
  const auto err = a.proc->err();
  CHECK(err.find("1 node(s) joined") != std::string::npos);
  CHECK(err.find("(2 workers)") != std::string::npos);
  CHECK(err.find("2 more needed") != std::string::npos);
  CHECK(err.find("waiting for nodes") != std::string::npos);  // live feedback
  CHECK(a.started().empty());
}
