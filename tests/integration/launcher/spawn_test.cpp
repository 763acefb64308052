// Starting workers at the sizes users run, and starts that go wrong: no launch
// hangs, a guard (or guard server) that never reports is killed and reported,
// and SIGTERM ends a job whose spawn is stuck within --stop_timeout.
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;

namespace {

// A copy of ddprun beside a ddp-guard that never starts its worker: ddprun
// finds the guard beside itself. The stand-in records its pid, then sleeps;
// as the guard server it never answers either. Where a test is about an
// exec'd guard, it turns the guard server off (DDP_GUARD_SERVER=0).
fs::path ddprun_with_stuck_guard(const TempDir& dir) {
  const fs::path bin_dir = dir / "bin";
  fs::create_directories(bin_dir);
  fs::copy_file(bin("ddprun"), bin_dir / "ddprun");
  write_file(bin_dir / "ddp-guard",
             "#!/bin/sh\necho $$ >> " + (dir / "guards").string() + "\nexec sleep 600\n");
  fs::permissions(bin_dir / "ddp-guard", fs::perms::owner_all, fs::perm_options::add);
  return bin_dir / "ddprun";
}

std::vector<pid_t> guard_pids(const TempDir& dir) {
  std::vector<pid_t> out;
  std::istringstream lines(read_file(dir / "guards"));
  for (pid_t pid = 0; lines >> pid;) out.push_back(pid);
  return out;
}

bool all_gone(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) {
    if (pid_alive(p)) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("launches of 32 workers never hang") {
  // A fork in the agent that took a lock held by another thread hung about
  // one launch in 40 of this size, forever; each launch takes ~0.1 s.
  constexpr int kLaunches = 150;
  TempDir dir;
  int failed = 0;
  for (int i = 0; i < kLaunches && failed == 0; ++i) {
    auto r = run(ddprun_argv({"--standalone", "--nproc_per_node=32", "--no_python", "/bin/true"}), dir.path(),
                 clean_env({}), std::chrono::seconds(30));
    if (r.code != 0) {
      UNSCOPED_INFO("launch " << i << " exit " << r.code << "\n" << r.err);
      ++failed;
    }
  }
  CHECK(failed == 0);
}

TEST_CASE("hundreds of restarts in a row never hang") {
  // 4 workers that fail at once, restarted 300 times: each restart forks 4 guards.
  TempDir dir;
  auto r = run(ddprun_argv({"--standalone", "--nproc_per_node=4", "--max_restarts=300", "--no_python",
                            "/bin/sh", "-c", "exit 1"}),
               dir.path(), clean_env({}), std::chrono::seconds(120));
  INFO(r.err.substr(r.err.size() > 3000 ? r.err.size() - 3000 : 0));
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("restarts=300/300"));
}

TEST_CASE("a guard that never reports fails its spawn within the deadline, and is killed") {
  TempDir dir;
  const auto ddprun_copy = ddprun_with_stuck_guard(dir);
  const auto start = std::chrono::steady_clock::now();
  auto r = run({ddprun_copy.string(), "--standalone", "--nproc_per_node=2", "--no_python", "/bin/true"},
               dir.path(), clean_env({{"DDP_GUARD_SERVER", "0"}}), std::chrono::seconds(60));
  const auto took = std::chrono::steady_clock::now() - start;
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("cannot start /bin/true: ddp-guard did not report within 10000 ms"));
  CHECK(took < std::chrono::seconds(20));
  const auto guards = guard_pids(dir);
  CHECK(guards.size() == 2);
  CHECK(wait_until([&] { return all_gone(guards); }, std::chrono::seconds(5)));
}

TEST_CASE("a guard server that never answers fails its spawn within the deadline, and is killed") {
  TempDir dir;
  const auto ddprun_copy = ddprun_with_stuck_guard(dir);
  const auto start = std::chrono::steady_clock::now();
  auto r = run({ddprun_copy.string(), "--standalone", "--nproc_per_node=2", "--no_python", "/bin/true"},
               dir.path(), clean_env({}), std::chrono::seconds(60));
  const auto took = std::chrono::steady_clock::now() - start;
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("the guard server did not answer within 5000 ms (pid "));
  CHECK_THAT(r.err, Catch::Contains("killed it; each worker's guard is exec'd from now on"));
  CHECK_THAT(r.err,
             Catch::Contains("cannot start /bin/true: the guard server did not answer within 5000 ms"));
  CHECK(took < std::chrono::seconds(30));
  // The server, and an exec'd guard for the other worker if its spawn began.
  const auto guards = guard_pids(dir);
  CHECK(!guards.empty());
  CHECK(wait_until([&] { return all_gone(guards); }, std::chrono::seconds(5)));
}

TEST_CASE("SIGTERM while a spawn is stuck ends the job once --stop_timeout is over") {
  TempDir dir;
  const auto ddprun_copy = ddprun_with_stuck_guard(dir);
  Process agent({ddprun_copy.string(), "--standalone", "--nproc_per_node=4", "--stop_timeout=1",
                 "--no_python", "/bin/true"},
                dir.path(), clean_env({{"DDP_GUARD_SERVER", "0"}}));
  REQUIRE(wait_until([&] { return guard_pids(dir).size() == 4; }));
  const auto start = std::chrono::steady_clock::now();
  agent.signal(SIGTERM);
  const auto code = agent.wait(std::chrono::seconds(30));
  const auto took = std::chrono::steady_clock::now() - start;
  INFO(agent.err());
  CHECK(code == std::optional<int>(143));
  // The grace, not the guards' 10 s report deadline, bounds it.
  CHECK(took >= std::chrono::seconds(1));
  CHECK(took < std::chrono::seconds(8));
  CHECK(wait_until([&] { return all_gone(guard_pids(dir)); }, std::chrono::seconds(5)));
}

TEST_CASE("a DDP_GUARD_SERVER that is not a boolean is refused in one line naming it, and nothing runs") {
  TempDir dir;
  // As every env switch (before: one warning, and the job ran with the server on).
  auto r = run(ddprun_argv({"--standalone", "--nproc_per_node=2", "--no_python", "/bin/true"}), dir.path(),
               clean_env({{"DDP_GUARD_SERVER", "maybe"}}), std::chrono::seconds(30));
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK(r.err ==
        "ddprun: error: env DDP_GUARD_SERVER: 'maybe' is not a boolean (true/false, 1/0, yes/no, on/off)\n");
}
