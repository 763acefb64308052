// The job's first failure named by its own time (docs/agent.md, "Failure
// report"), for a static job (--node_rank, --master_addr): rank 0 fails first
// on node0, which takes 6 s to stop its other worker; rank 2 fails two
// seconds later on node1, which stops at once and so reports first; node2 is
// healthy. Every node names rank 0's failure. (The c10d and etcd backends:
// tests/integration/elastic/elastic_first_failure_test.cpp; --hosts:
// tests/integration/ssh/ssh_test.sh.)
#include <catch2/catch.hpp>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;
using namespace std::chrono_literals;

TEST_CASE("a static job's nodes each name the earliest failure, not the first one reported") {
  TempDir dir;
  const int port = free_port();
  fs::create_directories(dir / "sync");
  auto node = [&](int rank) {
    auto args = static_node_flags(rank, 3, port);
    args.insert(args.end(),
                {"--nproc_per_node=2", "--rdzv_conf=join_timeout=30", "--stop_timeout=6", "--python", kPython,
                 (source_dir() / "tests" / "support" / "first_failure_worker.py").string(),
                 (dir / "sync").string(), "0", "2"});
    return ddprun_argv(args);
  };
  Process n0(node(0), dir.path(), clean_env({}), "node0");
  Process n1(node(1), dir.path(), clean_env({}), "node1");
  Process n2(node(2), dir.path(), clean_env({}), "node2");
  const auto c0 = n0.wait(90s);
  const auto c1 = n1.wait(90s);
  const auto c2 = n2.wait(90s);
  INFO("node0:\n" << n0.err() << "\nnode1:\n" << n1.err() << "\nnode2:\n" << n2.err());
  CHECK(c0 == std::optional<int>(1));
  CHECK(c1 == std::optional<int>(1));
  CHECK(c2 == std::optional<int>(1));
  const std::string first = "rank 0 on node0: exit code 1 (first failure)";
  // node0: its own report's root cause is the job's first failure.
  CHECK_THAT(n0.err(), Catch::Contains("rank       : 0 (local_rank 0)"));
  CHECK_THAT(n0.err(), !Catch::Contains("the job's first failure was on another node"));
  // node1: its report (rank 2), then the job's first failure, on node0.
  CHECK_THAT(n1.err(), Catch::Contains("rank       : 2 (local_rank 0)"));
  CHECK_THAT(n1.err(), Catch::Contains("ddprun: error: the job's first failure was on another node, at ") &&
                           Catch::Contains(": " + first + "\n"));
  // node2, healthy: its one error line names rank 0 on node0.
  CHECK(count_lines(n2.err(), "ddprun: error:") == 1);
  CHECK_THAT(n2.err(), Catch::Contains("reported a failure: " + first + "; the job's first failure, at "));
}
