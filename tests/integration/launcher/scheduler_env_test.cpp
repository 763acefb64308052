// Jobs that a scheduler starts with env only: Kubeflow Trainer v2's pods
// (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR,
// PET_MASTER_PORT and `ddprun train.py`), and the same job's Slurm env.
#include <catch2/catch.hpp>
#include <functional>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;

namespace {
// The env each rank saw, by global rank.
std::map<int, std::map<std::string, std::string>> dumps(const fs::path& dir, int world) {
  std::map<int, std::map<std::string, std::string>> out;
  for (int r = 0; r < world; ++r) out[r] = read_env_dump(dir / ("rank_" + std::to_string(r) + ".env"));
  return out;
}

// Two nodes, each `ddprun fake_worker` with only the scheduler's env
// `scheduler_env(node rank)` (node 1 started first); both must exit 0. The env
// each of the `world` ranks saw, by global rank.
std::map<int, std::map<std::string, std::string>> two_nodes_run(
    int world, const std::string& what, const std::function<EnvOverrides(int)>& scheduler_env) {
  TempDir dir;
  fs::create_directories(dir / "env");
  auto node = [&](int rank) {
    auto extra = scheduler_env(rank);
    extra["FAKE_ENV_DUMP"] = (dir / "env").string();
    EnvOverrides env = clean_env(std::move(extra));
    env.erase("DDP_SLURM");
    return std::make_unique<Process>(ddprun_argv({bin("fake_worker").string()}), dir.path(), env,
                                     what + std::to_string(rank));
  };
  auto n1 = node(1);
  auto n0 = node(0);
  const auto c0 = n0->wait(std::chrono::seconds(60));
  const auto c1 = n1->wait(std::chrono::seconds(60));
  INFO(what << " 0:\n" << n0->err() << what << " 1:\n" << n1->err());
  CHECK(c0 == std::optional<int>(0));
  CHECK(c1 == std::optional<int>(0));
  return dumps(dir / "env", world);
}
}  // namespace

TEST_CASE("two pods with only Kubeflow's PET_* env and `ddprun PROGRAM` form one job") {
  const int port = free_port();
  // Exactly what the Trainer sets; the cpu count stands in for `auto` on a GPU-less pod.
  const auto env = two_nodes_run(4, "pod", [&](int rank) {
    return EnvOverrides{{"PET_NNODES", "2"},
                        {"PET_NPROC_PER_NODE", "2"},
                        {"PET_NODE_RANK", std::to_string(rank)},
                        {"PET_MASTER_ADDR", "127.0.0.1"},
                        {"PET_MASTER_PORT", std::to_string(port)}};
  });
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(env.at(r).at("WORLD_SIZE") == "4");
    CHECK(env.at(r).at("GROUP_RANK") == std::to_string(r / 2));
    CHECK(env.at(r).at("LOCAL_RANK") == std::to_string(r % 2));
  }
}

TEST_CASE("two nodes of a Slurm step with only Slurm's env form one job") {
  // The store takes the port derived from job 777, step 0 (23108), as on a cluster.
  const auto env = two_nodes_run(2, "node", [](int rank) {
    return EnvOverrides{{"SLURM_JOB_ID", "777"},
                        {"SLURM_STEP_ID", "0"},
                        {"SLURM_STEP_NUM_NODES", "2"},
                        {"SLURM_JOB_NUM_NODES", "2"},
                        {"SLURM_NODEID", std::to_string(rank)},
                        {"SLURM_STEP_NODELIST", "localhost,localhost"},
                        {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}};
  });
  CHECK(env.at(0).at("WORLD_SIZE") == "2");
  CHECK(env.at(1).at("GROUP_RANK") == "1");
  CHECK(env.at(1).at("TORCHELASTIC_RUN_ID") == "777.0");
}
