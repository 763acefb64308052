#include "ddp/agent/worker_env.hpp"

#include <catch2/catch.hpp>

using namespace ddp::agent;

namespace {
ddp::rdzv::RendezvousResult two_node_round() {
  ddp::rdzv::RendezvousResult r;
  r.round = 3;
  r.group_rank = 1;
  r.group_world_size = 2;
  r.rank_offset = 4;
  r.world_size = 8;
  r.store_endpoint = {"10.0.0.7", 41234};
  r.worker_prefix = "/job/workers/round_3/";
  return r;
}

WorkerEnvInput input(int lr) {
  WorkerEnvInput in;
  in.local_rank = lr;
  in.local_world_size = 4;
  in.role = "trainer";
  in.restart_count = 2;
  in.max_restarts = 5;
  in.run_id = "job";
  in.error_file = "/logs/job/attempt_2/1/error.json";
  return in;
}
}  // namespace

TEST_CASE("worker env carries the torchrun contract for a rank on the second node") {
  const auto env = build_worker_env({{"PATH", "/usr/bin"}}, two_node_round(), input(1));
  CHECK(env.at("LOCAL_RANK") == "1");
  CHECK(env.at("RANK") == "5");
  CHECK(env.at("GROUP_RANK") == "1");
  CHECK(env.at("ROLE_RANK") == "5");
  CHECK(env.at("ROLE_NAME") == "trainer");
  CHECK(env.at("LOCAL_WORLD_SIZE") == "4");
  CHECK(env.at("WORLD_SIZE") == "8");
  CHECK(env.at("GROUP_WORLD_SIZE") == "2");
  CHECK(env.at("ROLE_WORLD_SIZE") == "8");
  CHECK(env.at("MASTER_ADDR") == "10.0.0.7");
  CHECK(env.at("MASTER_PORT") == "41234");
  CHECK(env.at("TORCHELASTIC_RESTART_COUNT") == "2");
  CHECK(env.at("TORCHELASTIC_MAX_RESTARTS") == "5");
  CHECK(env.at("TORCHELASTIC_RUN_ID") == "job");
  CHECK(env.at("TORCHELASTIC_USE_AGENT_STORE") == "True");
  CHECK(env.at("TORCHELASTIC_ERROR_FILE") == "/logs/job/attempt_2/1/error.json");
  CHECK(env.at("DDP_STORE_ENDPOINT") == "10.0.0.7:41234");
  CHECK(env.at("DDP_STORE_PREFIX") == "/job/workers/round_3/");
  CHECK(env.at("PATH") == "/usr/bin");
  CHECK(env.count("DDP_TOKEN_FILE") == 0);
}

TEST_CASE("contract variables replace inherited ones, other variables pass through") {
  const EnvMap base = {
      {"RANK", "99"}, {"MASTER_PORT", "1"}, {"HOME", "/home/u"}, {"DDP_TOKEN_FILE", "/stale"}};
  const auto env = build_worker_env(base, two_node_round(), input(0));
  CHECK(env.at("RANK") == "4");
  CHECK(env.at("MASTER_PORT") == "41234");
  CHECK(env.at("HOME") == "/home/u");
  CHECK(env.count("DDP_TOKEN_FILE") == 0);
}

TEST_CASE("OMP_NUM_THREADS defaults to 1 only when unset and several workers share the node") {
  auto in = input(0);
  CHECK(build_worker_env({}, two_node_round(), in).at("OMP_NUM_THREADS") == "1");
  CHECK(sets_default_omp_threads({}, in));
  CHECK(build_worker_env({{"OMP_NUM_THREADS", "8"}}, two_node_round(), in).at("OMP_NUM_THREADS") == "8");
  in.local_world_size = 1;
  CHECK(build_worker_env({}, two_node_round(), in).count("OMP_NUM_THREADS") == 0);
  CHECK_FALSE(sets_default_omp_threads({}, in));
}

TEST_CASE("a token file is passed as DDP_TOKEN_FILE") {
  auto in = input(0);
  in.token_file = "/etc/ddp/token";
  CHECK(build_worker_env({}, two_node_round(), in).at("DDP_TOKEN_FILE") == "/etc/ddp/token");
}

TEST_CASE("env strings are KEY=VALUE") {
  const auto strings = to_env_strings({{"A", "1"}, {"B", "x=y"}});
  REQUIRE(strings.size() == 2);
  CHECK(strings[0] == "A=1");
  CHECK(strings[1] == "B=x=y");
}

TEST_CASE(
    "MASTER_ADDR/MASTER_PORT name the agent's torch store proxy, DDP_STORE_ENDPOINT the round's store") {
  auto in = input(0);
  in.torch_store = {"127.0.0.1", 40001};
  const auto env = build_worker_env({}, two_node_round(), in);
  CHECK(env.at("MASTER_ADDR") == "127.0.0.1");
  CHECK(env.at("MASTER_PORT") == "40001");
  CHECK(env.at("DDP_STORE_ENDPOINT") == "10.0.0.7:41234");
  CHECK(env.at("DDP_STORE_PREFIX") == "/job/workers/round_3/");
}

TEST_CASE("on_failure=reform sets DDP_REFORM, and DDP_REFORM_JOINING on a replacement only") {
  const ddp::agent::EnvMap inherited = {{"DDP_REFORM", "1"}, {"DDP_REFORM_JOINING", "1"}};
  auto in = input(1);
  const auto plain = build_worker_env(inherited, two_node_round(), in);
  CHECK(plain.count("DDP_REFORM") == 0);
  CHECK(plain.count("DDP_REFORM_JOINING") == 0);
  in.reform = true;
  const auto first = build_worker_env(inherited, two_node_round(), in);
  CHECK(first.at("DDP_REFORM") == "1");
  CHECK(first.count("DDP_REFORM_JOINING") == 0);
  in.reform_joining = true;
  in.restart_count = 3;
  const auto joining = build_worker_env({}, two_node_round(), in);
  CHECK(joining.at("DDP_REFORM") == "1");
  CHECK(joining.at("DDP_REFORM_JOINING") == "1");
  CHECK(joining.at("RANK") == "5");
  CHECK(joining.at("TORCHELASTIC_RESTART_COUNT") == "3");
}
