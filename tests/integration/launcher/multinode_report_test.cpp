// What the healthy node of a failed multi-node job tells its user.
#include <catch2/catch.hpp>
#include <set>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;
using namespace std::chrono_literals;

TEST_CASE("on a multi-node failure the healthy node names the failed node, rank and cause") {
  TempDir dir;
  const int port = free_port();
  auto node = [&](int rank) {
    auto args = static_node_flags(rank, 2, port);
    args.insert(args.end(), {"--nproc_per_node=2", "--rdzv_conf=join_timeout=30", "--no_python",
                             bin("fake_worker").string()});
    return ddprun_argv(args);
  };
  // Global rank 3 (node 1) fails with a recorded error; every other worker hangs.
  const EnvOverrides env = {{"FAKE_ONLY_RANK", "3"},
                            {"FAKE_EXIT", "3"},
                            {"FAKE_ERROR_MESSAGE", "CUDA out of memory"},
                            {"FAKE_OTHERS_HANG", "1"}};
  Process n0(node(0), dir.path(), clean_env(env), "node0");
  Process n1(node(1), dir.path(), clean_env(env), "node1");
  auto c1 = n1.wait(std::chrono::seconds(60));
  auto c0 = n0.wait(std::chrono::seconds(60));
  INFO("node 0:\n" << n0.err() << "node 1:\n" << n1.err());
  CHECK(c1 == std::optional<int>(1));
  CHECK(c0 == std::optional<int>(1));
  // One error line on the healthy node, with what the failed node reported.
  REQUIRE(count_lines(n0.err(), "ddprun: error:") == 1);
  const auto err = n0.err();
  const auto at = err.find("ddprun: error:");
  const auto line = err.substr(at, err.find('\n', at) - at);
  CHECK_THAT(line, Catch::Contains("reported a failure: rank 3 on node1: exit code 3 (CUDA out of memory)"));
}

TEST_CASE("when every worker fails the report counts them all") {
  TempDir dir;
  // Each worker fails on its own once all four run (a bad batch everywhere);
  // SIGTERM from the first failure does not end the others first.
  write_file(dir / "bad.py",
             "import os, signal, sys, time\n"
             "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
             "d = sys.argv[1]\n"
             "open(os.path.join(d, 'up' + os.environ['RANK']), 'w').close()\n"
             "while len([f for f in os.listdir(d) if f.startswith('up')]) < 4:\n"
             "    time.sleep(0.01)\n"
             "sys.exit('bad batch')\n");
  auto r = ddprun(
      {"--nproc_per_node=4", "--python", "/usr/bin/python3", (dir / "bad.py").string(), dir.path().string()},
      dir);
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("ddprun: 4 worker(s) failed"));
}

TEST_CASE("static nodes started with different --nnodes both stop at once with one line naming both counts") {
  // Either order: the first node may already run its workers (--nnodes=1) or
  // still wait for a node that will never come (--nnodes=3).
  for (const int first_nnodes : {1, 3}) {
    INFO("node 0 has --nnodes=" << first_nnodes << ", node 1 has --nnodes=2");
    TempDir dir;
    const int port = free_port();
    auto node = [&](int rank, int nnodes) {
      auto args = static_node_flags(rank, nnodes, port);
      args.insert(args.end(), {"--no_python", bin("fake_worker").string()});
      return ddprun_argv(args);
    };
    const EnvOverrides env = {{"FAKE_HANG", "1"}};
    Process n0(node(0, first_nnodes), dir.path(), clean_env(env), "node0");
    if (first_nnodes == 1) {
      REQUIRE(wait_until([&] { return n0.err().find("started 1 workers") != std::string::npos; }, 30s));
    }
    Process n1(node(1, 2), dir.path(), clean_env(env), "node1");
    const auto c1 = n1.wait(30s);
    const auto c0 = n0.wait(30s);
    INFO("node 0:\n" << n0.err() << "node 1:\n" << n1.err());
    // The node that finds the mismatch: a configuration error (2). The other
    // learns it from the store and stops its workers (3). Which node finds it
    // is a race when node 0 still waits (either may read the other's count
    // first).
    REQUIRE(c0.has_value());
    REQUIRE(c1.has_value());
    if (first_nnodes == 1) {
      CHECK(*c1 == 2);
      CHECK(*c0 == 3);
    } else {
      CHECK(std::set<int>{*c0, *c1} == std::set<int>{2, 3});
    }
    for (const auto* p : {&n0, &n1}) {
      REQUIRE(count_lines(p->err(), "ddprun: error:") == 1);
      const auto err = p->err();
      const auto at = err.find("ddprun: error:");
      const auto line = err.substr(at, err.find('\n', at) - at);
      CHECK_THAT(line, Catch::Contains("--nnodes differs between nodes"));
      CHECK_THAT(line, Catch::Contains("has --nnodes=2"));
      CHECK_THAT(line, Catch::Contains("has --nnodes=" + std::to_string(first_nnodes)));
    }
  }
}
