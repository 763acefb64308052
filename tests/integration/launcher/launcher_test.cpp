// The real ddprun launching the real fake_worker: env contract, exit codes,
// restarts, failure reports, signals, orphans, logs, fds.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;

namespace {

// `nproc` fake workers that hang, under ddprun with `flags` and more FAKE_*
// `env` (FAKE_IGNORE_SIGTERM...); constructed once all of them have started.
struct HangingJob {
  HangingJob(int nproc, const std::vector<std::string>& flags, EnvOverrides env)
      : agent(argv(nproc, flags), dir.path(), with_pid_file(std::move(env))) {
    REQUIRE(wait_until([&] { return count_lines(read_file(pids), " start ") == nproc; }));
  }
  // The workers' pids, from their "start" lines.
  std::vector<pid_t> workers() const { return started_pids(read_file(pids)); }

  TempDir dir;
  const fs::path pids = dir / "pids";
  Process agent;

 private:
  static std::vector<std::string> argv(int nproc, const std::vector<std::string>& flags) {
    std::vector<std::string> args{"--nproc_per_node=" + std::to_string(nproc)};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--no_python", bin("fake_worker").string()});
    return ddprun_argv(args);
  }
  EnvOverrides with_pid_file(EnvOverrides env) const {
    env["FAKE_HANG"] = "1";
    env["FAKE_PID_FILE"] = pids.string();
    return clean_env(std::move(env));
  }
};

}  // namespace

TEST_CASE("every worker gets the torchrun env contract, for 1, 4 and 8 workers") {
  for (int n : {1, 4, 8}) {
    INFO("nproc_per_node=" << n);
    TempDir dir;
    auto r =
        ddprun({"--standalone", "--nproc_per_node=" + std::to_string(n), "--max_restarts=3", "--role=trainer",
                "--log_dir", (dir / "logs").string(), "--no_python", bin("fake_worker").string()},
               dir, {{"FAKE_ENV_DUMP", dir.path().string()}});
    INFO(r.err);
    REQUIRE(r.code == 0);
    std::set<std::string> ports;
    std::set<std::string> run_ids;
    for (int rank = 0; rank < n; ++rank) {
      auto env = read_env_dump(dir / ("rank_" + std::to_string(rank) + ".env"));
      INFO("rank " << rank);
      CHECK(env["LOCAL_RANK"] == std::to_string(rank));
      CHECK(env["RANK"] == std::to_string(rank));
      CHECK(env["GROUP_RANK"] == "0");
      CHECK(env["ROLE_RANK"] == std::to_string(rank));
      CHECK(env["ROLE_NAME"] == "trainer");
      CHECK(env["LOCAL_WORLD_SIZE"] == std::to_string(n));
      CHECK(env["WORLD_SIZE"] == std::to_string(n));
      CHECK(env["GROUP_WORLD_SIZE"] == "1");
      CHECK(env["ROLE_WORLD_SIZE"] == std::to_string(n));
      CHECK(env["MASTER_ADDR"] == "127.0.0.1");
      CHECK(std::stoi(env["MASTER_PORT"]) > 0);
      // MASTER_PORT: the agent's torch store proxy, in front of the store itself.
      CHECK(env["DDP_STORE_ENDPOINT"].rfind("127.0.0.1:", 0) == 0);
      CHECK_FALSE(env["DDP_STORE_PREFIX"].empty());
      CHECK(env["TORCHELASTIC_RESTART_COUNT"] == "0");
      CHECK(env["TORCHELASTIC_MAX_RESTARTS"] == "3");
      CHECK(env["TORCHELASTIC_USE_AGENT_STORE"] == "True");
      CHECK(env["TORCHELASTIC_ERROR_FILE"] == (dir / "logs").string() + "/" + env["TORCHELASTIC_RUN_ID"] +
                                                  "/attempt_0/" + std::to_string(rank) + "/error.json");
      CHECK(env["OMP_NUM_THREADS"] == (n > 1 ? "1" : ""));
      CHECK(env["FDS"] == "0,1,2");
      ports.insert(env["MASTER_PORT"]);
      run_ids.insert(env["TORCHELASTIC_RUN_ID"]);
    }
    CHECK(ports.size() == 1);
    CHECK(run_ids.size() == 1);
    CHECK(run_ids.begin()->size() == 36);  // a fresh uuid per --standalone run
  }
}

TEST_CASE("a worker's exit code fails the run with exit 1 and its rank named") {
  TempDir dir;
  auto r = ddprun({"--nproc_per_node=3", "--stop_timeout=5", "--no_python", bin("fake_worker").string()}, dir,
                  {{"FAKE_ONLY_RANK", "2"}, {"FAKE_EXIT", "7"}, {"FAKE_OTHERS_HANG", "1"}});
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("rank       : 2 (local_rank 2)"));
  CHECK_THAT(r.err, Catch::Contains("exit code 7"));
  CHECK(ddprun({"--nproc_per_node=2", "--no_python", bin("fake_worker").string()}, dir).code == 0);
}

TEST_CASE("failed workers restart with TORCHELASTIC_RESTART_COUNT incremented") {
  TempDir dir;
  const auto pids = dir / "pids";
  auto r = ddprun({"--nproc_per_node=2", "--max_restarts=3", "--no_python", bin("fake_worker").string()}, dir,
                  {{"FAKE_FAIL_ON_RESTART_BELOW", "2"},
                   {"FAKE_PID_FILE", pids.string()},
                   {"FAKE_ENV_DUMP", dir.path().string()}});
  CHECK(r.code == 0);
  // Attempts 0, 1 and 2 (a worker stopped early in a failed attempt may never start).
  CHECK(count_lines(read_file(pids), " start ") >= 4);
  CHECK(read_env_dump(dir / "rank_0.env")["TORCHELASTIC_RESTART_COUNT"] == "2");
  CHECK(read_env_dump(dir / "rank_1.env")["TORCHELASTIC_RESTART_COUNT"] == "2");
  CHECK_THAT(r.err, Catch::Contains("restarting workers (1/3)"));
  CHECK_THAT(r.err, Catch::Contains("restarting workers (2/3)"));
  CHECK(r.err.find("restarting workers (3/3)") == std::string::npos);
}

TEST_CASE("when max_restarts is spent the run fails with exit 1") {
  TempDir dir;
  const auto pids = dir / "pids";
  auto r =
      ddprun({"--nproc_per_node=1", "--max_restarts=1", "--no_python", bin("fake_worker").string()}, dir,
             {{"FAKE_FAIL_ON_RESTART_BELOW", "5"}, {"FAKE_EXIT", "4"}, {"FAKE_PID_FILE", pids.string()}});
  CHECK(r.code == 1);
  CHECK(count_lines(read_file(pids), " start ") == 2);
  CHECK_THAT(r.err, Catch::Contains("restarts=1/1"));
  CHECK_THAT(r.err, Catch::Contains("exit code 4"));
}

TEST_CASE("the crash report names the signal, the error-file message and the stderr tail") {
  TempDir dir;
  const auto logs = dir / "logs";
  auto r = ddprun({"--nproc_per_node=2", "--rdzv_id=crashjob", "--log_dir", logs.string(), "--stop_timeout=5",
                   "--no_python", bin("fake_worker").string()},
                  dir,
                  {{"FAKE_ONLY_RANK", "1"},
                   {"FAKE_CRASH", "segv"},
                   {"FAKE_PRINT", "12"},
                   {"FAKE_ERROR_MESSAGE", "RuntimeError: boom"},
                   {"FAKE_OTHERS_HANG", "1"}});
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("signal SIGSEGV"));
  CHECK_THAT(r.err, Catch::Contains("message    : RuntimeError: boom"));
  CHECK_THAT(r.err, Catch::Contains("Traceback (most recent call last):"));
  CHECK_THAT(r.err, Catch::Contains("    err 11 of rank 1"));
  CHECK_THAT(r.err, Catch::Contains("rank       : 1 (local_rank 1)"));
  const auto report = read_file(logs / "crashjob" / "attempt_0" / "failure.json");
  CHECK_THAT(report, Catch::Contains(R"("signal": "SIGSEGV")"));
  CHECK_THAT(report, Catch::Contains(R"("message": "RuntimeError: boom")"));
  CHECK_THAT(report, Catch::Contains("err 11 of rank 1"));
}

TEST_CASE(
    "a worker SIGKILLed from outside is not explained by its last stderr line, which the report keeps") {
  TempDir dir;
  auto r = ddprun({"--nproc_per_node=1", "--max_restarts=1", "--no_python", "/bin/sh", "-c",
                   "echo 'loading shard 3' >&2; kill -9 $$"},
                  dir);
  INFO(r.err);
  CHECK(r.code == 1);
  // The one-line cause (restart line, other nodes' view) is the signal alone:
  // the line before it did not cause it.
  CHECK_THAT(r.err, Catch::Contains("restarting workers (1/1) after failure of rank 0 on "));
  CHECK_THAT(r.err, Catch::Contains(": signal SIGKILL\n"));
  CHECK_THAT(r.err, !Catch::Contains("signal SIGKILL (loading shard 3)"));
  // The failure report still shows what the worker printed last.
  CHECK_THAT(r.err, Catch::Contains("    loading shard 3"));
}

TEST_CASE("SIGTERM to the agent stops every worker and exits 143") {
  HangingJob job(4, {"--stop_timeout=5"}, {});
  job.agent.signal(SIGTERM);
  auto code = job.agent.wait(std::chrono::seconds(10));
  REQUIRE(code);
  CHECK(*code == 143);
  for (auto pid : job.workers()) CHECK_FALSE(pid_alive(pid));
}

TEST_CASE("kill -9 of the agent leaves no worker running a second later") {
  HangingJob job(4, {}, {{"FAKE_IGNORE_SIGTERM", "1"}});
  ::kill(job.agent.pid(), SIGKILL);
  REQUIRE(job.agent.wait(std::chrono::seconds(5)));
  const auto workers = job.workers();
  CHECK(wait_until(
      [&] {
        for (auto pid : workers) {
          if (pid_alive(pid)) return false;
        }
        return true;
      },
      std::chrono::seconds(1)));
}

TEST_CASE("a worker that ignores SIGTERM is killed after the grace period") {
  HangingJob job(2, {"--stop_timeout=0.5"}, {{"FAKE_IGNORE_SIGTERM", "1"}});
  job.agent.signal(SIGTERM);
  auto code = job.agent.wait(std::chrono::seconds(30));
  REQUIRE(code);
  CHECK(*code == 143);
  // SIGTERM first, SIGKILL only once the 500 ms grace is over.
  const auto err = job.agent.err();
  INFO(err);
  const auto term = err.find("stopping 2 workers with SIGTERM (SIGKILL after 500 ms)");
  const auto kill = err.find("2 workers still running after 500 ms: sending SIGKILL");
  REQUIRE(term != std::string::npos);
  REQUIRE(kill != std::string::npos);
  CHECK(term < kill);
  for (auto pid : job.workers()) CHECK_FALSE(pid_alive(pid));
}

TEST_CASE("a second Ctrl-C kills the workers at once") {
  HangingJob job(2, {"--stop_timeout=60"}, {{"FAKE_IGNORE_SIGINT", "1"}});
  job.agent.signal(SIGINT);
  REQUIRE(wait_until([&] { return job.agent.err().find("received SIGINT") != std::string::npos; }));
  job.agent.signal(SIGINT);
  auto code = job.agent.wait(std::chrono::seconds(10));
  REQUIRE(code);
  CHECK(*code == 130);
  for (auto pid : job.workers()) CHECK_FALSE(pid_alive(pid));
}
