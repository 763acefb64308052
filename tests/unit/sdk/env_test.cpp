#include <catch2/catch.hpp>
#include <map>

#include "ddp/common/error.hpp"
#include "ddp/common/hostlist.hpp"
#include "ddp/init.hpp"

namespace {
ddp::Context parse(std::map<std::string, std::string> vars) {
  return ddp::parse_env([&](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}
// Tests change a copy of this set with `vars[NAME] = std::string(VALUE)`:
// assigning the literal itself makes GCC 12 warn (-Wrestrict, a false
// positive on libstdc++'s string replace after a map copy, GCC bug 105651).
const std::map<std::string, std::string> kHandSet{
    {"RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.5"}, {"MASTER_PORT", "29500"}};
}  // namespace

TEST_CASE("hand-set env gives the ranks and rank 0's store on MASTER_ADDR:MASTER_PORT") {
  const auto ctx = parse(kHandSet);
  CHECK(ctx.rank == 1);
  CHECK(ctx.world_size == 4);
  CHECK(ctx.local_rank == 1);  // no LOCAL_*: one host
  CHECK(ctx.local_world_size == 4);
  CHECK(ctx.restart_count == 0);
  CHECK(ctx.store_endpoint == "10.0.0.5:29500");
  CHECK(ctx.store_prefix == "ddp/sdk/");
}

TEST_CASE("ddprun's DDP_STORE_ENDPOINT and DDP_STORE_PREFIX win over MASTER_ADDR") {
  auto vars = kHandSet;
  vars["DDP_STORE_ENDPOINT"] = std::string("node0:41000");
  vars["DDP_STORE_PREFIX"] = std::string("ddp/run1/r3/");
  vars["LOCAL_RANK"] = std::string("1");
  vars["LOCAL_WORLD_SIZE"] = std::string("2");
  vars["GROUP_RANK"] = std::string("0");
  vars["TORCHELASTIC_RESTART_COUNT"] = std::string("2");
  vars["TORCHELASTIC_RUN_ID"] = std::string("run1");
  const auto ctx = parse(vars);
  CHECK(ctx.store_endpoint == "node0:41000");
  CHECK(ctx.store_prefix == "ddp/run1/r3/");
  CHECK(ctx.local_world_size == 2);
  CHECK(ctx.restart_count == 2);
  CHECK(ctx.run_id == "run1");
}

TEST_CASE("under torchrun's agent store the SDK's store moves to MASTER_PORT + 1") {
  auto vars = kHandSet;
  vars["TORCHELASTIC_USE_AGENT_STORE"] = std::string("True");
  CHECK(parse(vars).store_endpoint == "10.0.0.5:29501");
}

TEST_CASE("a missing RANK is reported naming the variable") {
  auto vars = kHandSet;
  vars.erase("RANK");
  CHECK_THROWS_AS(parse(vars), ddp::ConfigError);
  CHECK_THROWS_WITH(parse(vars), Catch::StartsWith("RANK is not set"));
}

TEST_CASE("RANK >= WORLD_SIZE is reported with the allowed range") {
  auto vars = kHandSet;
  vars["RANK"] = std::string("4");
  CHECK_THROWS_WITH(parse(vars), "RANK=4 is out of range for WORLD_SIZE=4 (must be 0..3)");
}

TEST_CASE("non-numeric values name the variable and the value") {
  auto vars = kHandSet;
  vars["WORLD_SIZE"] = std::string("four");
  CHECK_THROWS_WITH(parse(vars), Catch::StartsWith("WORLD_SIZE='four' is not a number"));
  vars = kHandSet;
  vars["MASTER_PORT"] = std::string("70000");
  CHECK_THROWS_WITH(parse(vars), Catch::Contains("MASTER_PORT"));
  vars = kHandSet;
  vars["RANK"] = std::string("-1");
  CHECK_THROWS_WITH(parse(vars), Catch::StartsWith("RANK='-1' is not a number"));
}

TEST_CASE("without DDP_STORE_ENDPOINT, MASTER_ADDR and MASTER_PORT are required") {
  auto vars = kHandSet;
  vars.erase("MASTER_ADDR");
  CHECK_THROWS_WITH(parse(vars), Catch::StartsWith("MASTER_ADDR is not set"));
  vars = kHandSet;
  vars.erase("MASTER_PORT");
  CHECK_THROWS_WITH(parse(vars), Catch::StartsWith("MASTER_PORT is not set"));
}

TEST_CASE("LOCAL_RANK must be below LOCAL_WORLD_SIZE") {
  auto vars = kHandSet;
  vars["LOCAL_RANK"] = std::string("2");
  vars["LOCAL_WORLD_SIZE"] = std::string("2");
  CHECK_THROWS_WITH(parse(vars), Catch::StartsWith("LOCAL_RANK=2 is out of range"));
}

// `srun -N2 --ntasks-per-node=4 ./worker`: task 6 is local task 2 on node 1.
const std::map<std::string, std::string> kSrunTask{{"SLURM_JOB_ID", "4242"},
                                                   {"SLURM_STEP_ID", "0"},
                                                   {"SLURM_PROCID", "6"},
                                                   {"SLURM_NTASKS", "8"},
                                                   {"SLURM_STEP_NUM_TASKS", "8"},
                                                   {"SLURM_LOCALID", "2"},
                                                   {"SLURM_NODEID", "1"},
                                                   {"SLURM_STEP_NODELIST", "gpu[07-08]"},
                                                   {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"}};

// kSrunTask with `changes` applied.
std::map<std::string, std::string> srun_task(const std::map<std::string, std::string>& changes) {
  auto vars = kSrunTask;
  for (const auto& change : changes) vars.insert_or_assign(change.first, change.second);
  return vars;
}

TEST_CASE("a task started by srun without a launcher takes its ranks from Slurm") {
  const auto ctx = parse(kSrunTask);
  CHECK(ctx.rank == 6);
  CHECK(ctx.world_size == 8);
  CHECK(ctx.local_rank == 2);
  CHECK(ctx.local_world_size == 4);
  CHECK(ctx.group_rank == 1);
  CHECK(ctx.run_id == "4242.0");
  CHECK(ctx.store_endpoint == "gpu07:" + std::to_string(ddp::slurm_store_port(4242, 0)));
}

TEST_CASE("under srun, MASTER_ADDR and MASTER_PORT still choose the store") {
  const auto vars = srun_task({{"MASTER_ADDR", "10.0.0.7"}, {"MASTER_PORT", "29600"}});
  CHECK(parse(vars).store_endpoint == "10.0.0.7:29600");
}

TEST_CASE("the torchrun variables win over Slurm's") {
  const auto ctx = parse(
      srun_task({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.5"}, {"MASTER_PORT", "29500"}}));
  CHECK(ctx.rank == 1);
  CHECK(ctx.world_size == 2);
  CHECK(ctx.store_endpoint == "10.0.0.5:29500");
}

TEST_CASE("a broken Slurm node list names the variable") {
  CHECK_THROWS_WITH(parse(srun_task({{"SLURM_STEP_NODELIST", "gpu[07-"}})),
                    Catch::StartsWith("SLURM_STEP_NODELIST='gpu[07-' is not a Slurm host list"));
}
