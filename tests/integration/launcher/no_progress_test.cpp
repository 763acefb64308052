// --max_no_progress_restarts (docs/agent-recovery.md, "No progress, no requeue"): a job
// whose attempts keep failing before any worker beats or completes a section
// stops with exit 4 instead of spending every restart; progress resets it.
#include <catch2/catch.hpp>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;

TEST_CASE("attempts that fail without progress stop the job with exit 4 before max_restarts is spent") {
  TempDir dir;
  auto r = ddprun({"--standalone", "--nproc_per_node=2", "--max_restarts=5", "--max_no_progress_restarts=1",
                   "--no_python", bin("fake_worker").string()},
                  dir, {{"FAKE_EXIT", "3"}});
  INFO(r.err);
  CHECK(r.code == 4);
  // One restart without progress is allowed, the second is not.
  CHECK(count_lines(r.err, "restarting workers (1/5)") == 1);
  CHECK(count_lines(r.err, "restarting workers (2/5)") == 0);
  CHECK_THAT(r.err, Catch::Contains("1/1 restarts without progress"));
  REQUIRE(count_lines(r.err, "ddprun: error:") == 1);
  CHECK_THAT(r.err,
             Catch::Contains("ddprun: error: 2 attempts in a row ended without progress (no heartbeat, "
                             "no completed section): not restarting again (--max_no_progress_restarts=1)"));
}

TEST_CASE("with --max_no_progress_restarts=0 a failure after progress still restarts, and the job succeeds") {
  TempDir dir;
  // The example trainer heartbeats in a "step" section every step; it fails
  // after its first epoch on the first attempt only.
  auto r = ddprun({"--standalone", "--nproc_per_node=2", "--max_restarts=2", "--max_no_progress_restarts=0",
                   "--no_python", bin("ddp-example-train").string(), "--epochs", "2", "--dataset-size", "256",
                   "--fail-at-epoch", "1", "--checkpoint", (dir / "ckpt").string()},
                  dir);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(count_lines(r.err, "restarting workers (1/2)") == 1);
  CHECK_THAT(r.err, !Catch::Contains("without progress"));
}

TEST_CASE("with --max_no_progress_restarts=0 the first failure without progress stops the job") {
  TempDir dir;
  auto r = ddprun({"--standalone", "--max_restarts=3", "--max_no_progress_restarts=0", "--no_python",
                   bin("fake_worker").string()},
                  dir, {{"FAKE_EXIT", "3"}});
  INFO(r.err);
  CHECK(r.code == 4);
  CHECK(count_lines(r.err, "restarting workers") == 0);
  CHECK_THAT(r.err, Catch::Contains("1 attempts in a row ended without progress"));
}

TEST_CASE("without --max_no_progress_restarts every restart is spent as before") {
  TempDir dir;
  auto r = ddprun({"--standalone", "--max_restarts=2", "--no_python", bin("fake_worker").string()}, dir,
                  {{"FAKE_EXIT", "3"}});
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK(count_lines(r.err, "restarting workers (2/2)") == 1);
  CHECK_THAT(r.err, !Catch::Contains("without progress"));
}

TEST_CASE(
    "on two nodes the job stops at the same attempt on both: exit 4, or 3 where the other closed it first") {
  TempDir dir;
  const int port = free_port();
  auto node = [&](int rank) {
    auto args = static_node_flags(rank, 2, port);
    args.insert(args.end(), {"--nproc_per_node=2", "--rdzv_conf=join_timeout=30", "--max_restarts=5",
                             "--max_no_progress_restarts=1", "--no_python", bin("fake_worker").string()});
    return ddprun_argv(args);
  };
  // Global rank 3 (node 1) fails at once in every attempt; the others wait.
  const EnvOverrides env = {{"FAKE_ONLY_RANK", "3"}, {"FAKE_EXIT", "3"}, {"FAKE_OTHERS_HANG", "1"}};
  Process n0(node(0), dir.path(), clean_env(env), "node0");
  Process n1(node(1), dir.path(), clean_env(env), "node1");
  const auto c1 = n1.wait(std::chrono::seconds(60));
  const auto c0 = n0.wait(std::chrono::seconds(60));
  INFO("node 0:\n" << n0.err() << "node 1:\n" << n1.err());
  CHECK(c1 == std::optional<int>(4));
  CHECK((c0 == std::optional<int>(4) || c0 == std::optional<int>(3)));
  for (const auto& err : {n0.err(), n1.err()}) {
    CHECK(count_lines(err, "restarting workers (2/5)") == 0);
    CHECK_THAT(err, Catch::Contains("2 attempts in a row ended without progress"));
  }
}
