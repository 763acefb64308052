// What the healthy node of a failed multi-node job tells its user.
#include <catch2/catch.hpp>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;

TEST_CASE("on a multi-node failure the healthy node names the failed node, rank and cause") {
  TempDir dir;
  const int port = free_port();
  auto node = [&](int rank) {
    return ddprun_argv({"--nnodes=2", "--node_rank=" + std::to_string(rank), "--nproc_per_node=2",
                        "--master_addr=127.0.0.1", "--master_port=" + std::to_string(port),
                        "--local_addr=node" + std::to_string(rank), "--rdzv_conf=join_timeout=30",
                        "--no_python", bin("fake_worker").string()});
  };
  // Global rank 3 (node 1) fails with a recorded error; every other worker hangs.
  const EnvOverrides env = {{"FAKE_ONLY_RANK", "3"}, {"FAKE_EXIT", "3"},
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
  auto r = ddprun({"--nproc_per_node=4", "--python", "/usr/bin/python3", (dir / "bad.py").string(),
                   dir.path().string()},
                  dir);
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("ddprun: 4 worker(s) failed"));
}
