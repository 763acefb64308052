// The Slurm layer of ddprun's options, and Kubeflow's PET_* env: what a job
// started by a scheduler with no rendezvous flags turns into.
#include "slurm_env.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <sstream>

#include "ddp/common/error.hpp"
#include "ddp/common/hostlist.hpp"
#include "ddp/launcher/launch_options.hpp"

using namespace ddp::launcher;

namespace {
using Env = std::map<std::string, std::string>;

// What `srun -N2 --ntasks-per-node=1 ddprun ...` gives the task on the second node.
Env srun_env(Env extra = {}) {
  Env env = {{"SLURM_JOB_ID", "4242"},
             {"SLURM_JOBID", "4242"},
             {"SLURM_STEP_ID", "3"},
             {"SLURM_STEPID", "3"},
             {"SLURM_JOB_NUM_NODES", "3"},
             {"SLURM_NNODES", "3"},
             {"SLURM_STEP_NUM_NODES", "2"},
             {"SLURM_NODEID", "1"},
             {"SLURM_JOB_NODELIST", "localhost,gpu-a[001-002]"},
             {"SLURM_STEP_NODELIST", "localhost,gpu-a001"},
             {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
             {"SLURM_PROCID", "1"},
             {"SLURM_NTASKS", "2"},
             {"SLURM_LOCALID", "0"}};
  for (auto& [k, v] : extra) env[k] = v;
  return env;
}

ParseOutcome parse_full(std::vector<std::string> args, const Env& env) {
  args.insert(args.begin(), "ddprun");
  return parse_command_line(args, env);
}

LaunchOptions parse(std::vector<std::string> args, const Env& env) {
  auto out = parse_full(std::move(args), env);
  REQUIRE(out.kind == ParseOutcome::Kind::kRun);
  return out.options;
}

std::string error_of(const Env& env, std::vector<std::string> args = {"train.py"}) {
  try {
    parse(std::move(args), env);
  } catch (const ddp::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

// The --print-config row of `option`, split into value and source.
std::pair<std::string, std::string> row(const std::string& text, const std::string& option) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string name, value, source;
    words >> name >> value;
    std::getline(words, source);
    if (name == option) return {value, source.substr(source.find_first_not_of(' '))};
  }
  return {};
}

HostInfo host(int gpus = 0) {
  HostInfo h;
  h.hostname = "node-b";
  h.pid = 7;
  h.gpu_count = gpus;
  h.cpu_count = 6;
  h.env = {{"PATH", "/usr/bin:/bin"}};
  return h;
}
}  // namespace

TEST_CASE("inside srun every rendezvous value comes from the step and says slurm") {
  const auto out = parse_full({"--print-config", "--no_python", "/bin/true"}, srun_env());
  REQUIRE(out.kind == ParseOutcome::Kind::kPrintConfig);
  CHECK(row(out.text, "nnodes") == std::pair<std::string, std::string>{"2", "slurm"});
  CHECK(row(out.text, "node_rank") == std::pair<std::string, std::string>{"1", "slurm"});
  CHECK(row(out.text, "master_addr") == std::pair<std::string, std::string>{"localhost", "slurm"});
  CHECK(row(out.text, "master_port") ==
        std::pair<std::string, std::string>{std::to_string(ddp::slurm_store_port(4242, 3)), "slurm"});
  CHECK(row(out.text, "rdzv_id") == std::pair<std::string, std::string>{"4242.3", "slurm"});
  CHECK(row(out.text, "nproc_per_node") == std::pair<std::string, std::string>{"1", "slurm"});
  CHECK(row(out.text, "signals_to_handle").second == "slurm");
  CHECK(row(out.text, "rdzv_backend").second == "default");
}

TEST_CASE("the Slurm step becomes a static rendezvous with the first node hosting the store") {
  const auto cfg = translate_options(parse({"--no_python", "/bin/true"}, srun_env()), host());
  CHECK(cfg.rendezvous.backend == "static");
  CHECK(cfg.rendezvous.node_rank == 1);
  CHECK(cfg.rendezvous.is_host == false);
  CHECK(cfg.rendezvous.min_nodes == 2);
  CHECK(cfg.rendezvous.max_nodes == 2);
  CHECK(cfg.rendezvous.endpoint.host == "localhost");
  CHECK(cfg.rendezvous.endpoint.port == ddp::slurm_store_port(4242, 3));
  const auto first =
      translate_options(parse({"--no_python", "/bin/true"}, srun_env({{"SLURM_NODEID", "0"}})), host());
  CHECK(first.rendezvous.is_host == true);
}

TEST_CASE("sbatch --signal notices are forwarded to the workers under Slurm") {
  const auto cfg = translate_options(parse({"--no_python", "/bin/true"}, srun_env()), host());
  CHECK(std::find(cfg.signals_to_handle.begin(), cfg.signals_to_handle.end(), SIGUSR1) !=
        cfg.signals_to_handle.end());
}

TEST_CASE("two jobs, and two steps of one job, get different store ports") {
  const auto a = parse({"x.py"}, srun_env());
  const auto b = parse({"x.py"}, srun_env({{"SLURM_JOB_ID", "4243"}}));
  const auto c = parse({"x.py"}, srun_env({{"SLURM_STEP_ID", "4"}}));
  CHECK(a.master_port != b.master_port);
  CHECK(a.master_port != c.master_port);
  CHECK(c.rdzv_id == "4242.4");
}

TEST_CASE("workers per node follow the GPUs Slurm gave the step") {
  CHECK(parse({"x.py"}, srun_env({{"SLURM_GPUS_ON_NODE", "4"}})).nproc_per_node == "4");
  CHECK(parse({"x.py"}, srun_env({{"CUDA_VISIBLE_DEVICES", "2,3,5"}})).nproc_per_node == "3");
  CHECK(parse({"x.py"}, srun_env({{"SLURM_GPUS_ON_NODE", "0"}, {"CUDA_VISIBLE_DEVICES", "NoDevFiles"}}))
            .nproc_per_node == "1");
  CHECK(parse({"x.py"}, srun_env()).nproc_per_node == "1");
}

TEST_CASE("flags, the config file and PET_* env win over Slurm") {
  const auto o = parse({"--nproc_per_node=8", "--master_addr=10.0.0.9", "x.py"},
                       srun_env({{"PET_NNODES", "2"}, {"PET_MASTER_PORT", "29999"}, {"PET_NODE_RANK", "0"}}));
  CHECK(o.nproc_per_node == "8");
  CHECK(o.master_addr == "10.0.0.9");
  CHECK(o.master_port == 29999);
  CHECK(o.node_rank == 0);
  CHECK(o.nnodes == "2");
  CHECK(o.rdzv_id == "4242.3");  // what nothing above set still comes from Slurm
  const auto printed =
      parse_full({"--print-config", "--nproc_per_node=8", "x.py"}, srun_env({{"PET_NODE_RANK", "0"}}));
  CHECK(row(printed.text, "nproc_per_node").second == "flag");
  CHECK(row(printed.text, "node_rank").second == "env PET_NODE_RANK");
}

TEST_CASE("a single-node job gets a store on a free port, not a derived one") {
  Env env = srun_env({{"SLURM_STEP_NUM_NODES", "1"},
                      {"SLURM_NODEID", "0"},
                      {"SLURM_STEP_NODELIST", "gpu-a001"},
                      {"SLURM_STEP_TASKS_PER_NODE", "1"}});
  const auto cfg = translate_options(parse({"--no_python", "/bin/true"}, env), host());
  CHECK(cfg.rendezvous.backend == "standalone");
}

TEST_CASE("ddprun in the batch script of a one-node job runs it") {
  Env env = {{"SLURM_JOB_ID", "77"},
             {"SLURM_JOB_NUM_NODES", "1"},
             {"SLURM_NODEID", "0"},
             {"SLURM_JOB_NODELIST", "n1"}};
  const auto o = parse({"x.py"}, env);
  CHECK(o.nnodes == "1");
  CHECK(o.rdzv_id == "77");
}

TEST_CASE("ddprun in the batch script of a multi-node job says to start it with srun") {
  Env env = {{"SLURM_JOB_ID", "77"},
             {"SLURM_JOB_NUM_NODES", "2"},
             {"SLURM_NODEID", "0"},
             {"SLURM_JOB_NODELIST", "n[1-2]"}};
  const auto e = error_of(env);
  CHECK_THAT(e, Catch::Contains("srun --ntasks-per-node=1 ddprun"));
  CHECK(e.find('\n') == std::string::npos);
  CHECK(error_of(env, {"--nnodes=1", "x.py"}) == "no error");
}

TEST_CASE("an inconsistent Slurm env is a one-line error naming the variables") {
  CHECK_THAT(
      error_of(srun_env({{"SLURM_NODEID", "2"}})),
      Catch::StartsWith("SLURM_NODEID=2 is not below SLURM_STEP_NUM_NODES=2: the Slurm env is inconsistent"));
  CHECK_THAT(error_of(srun_env({{"SLURM_STEP_NODELIST", "n[1-3]"}})),
             Catch::StartsWith("SLURM_STEP_NODELIST='n[1-3]' names 3 hosts but SLURM_STEP_NUM_NODES=2"));
  CHECK_THAT(error_of(srun_env({{"SLURM_STEP_NODELIST", "n[1-"}})),
             Catch::StartsWith("SLURM_STEP_NODELIST='n[1-' is not a Slurm host list"));
  CHECK_THAT(error_of(srun_env({{"SLURM_JOB_ID", "abc"}})),
             Catch::StartsWith("SLURM_JOB_ID='abc' is not a number"));
  CHECK_THAT(error_of(srun_env({{"SLURM_STEP_NUM_NODES", "0"}, {"SLURM_NODEID", "0"}})),
             Catch::Contains("is not below SLURM_STEP_NUM_NODES=0"));
}

TEST_CASE("several ddprun tasks per node are refused with the srun option that fixes it") {
  const auto e = error_of(srun_env({{"SLURM_STEP_TASKS_PER_NODE", "4(x2)"}}));
  CHECK_THAT(
      e, Catch::StartsWith("SLURM_STEP_TASKS_PER_NODE=4(x2): ddprun starts the workers of a node itself"));
  CHECK_THAT(e, Catch::Contains("--ntasks-per-node=1"));
}

TEST_CASE("DDP_SLURM=0 ignores the Slurm env, and outside Slurm nothing is derived") {
  const auto o = parse({"x.py"}, srun_env({{"DDP_SLURM", "0"}, {"SLURM_NODEID", "9"}}));
  CHECK(o.nnodes == "1:1");
  CHECK(o.node_rank == 0);
  CHECK(o.rdzv_id == "none");
  CHECK(slurm_option_values({{"PATH", "/bin"}}, {}, false).empty());
}

TEST_CASE("a standalone job inside an allocation takes only the workers per node from Slurm") {
  const auto o =
      parse({"--standalone", "x.py"}, srun_env({{"SLURM_GPUS_ON_NODE", "2"}, {"SLURM_NODEID", "9"}}));
  CHECK(o.nproc_per_node == "2");
  CHECK(o.nnodes == "1:1");
  CHECK(o.rdzv_id == "none");
}

TEST_CASE("a first node whose name does not resolve is reached at the address the lookup gives") {
  std::string asked;
  const auto values = slurm_option_values(srun_env({{"SLURM_STEP_NODELIST", "n[7-8]"}}), {}, false,
                                          [&asked](const std::string& node) {
                                            asked = node;
                                            return std::string("10.1.2.3");
                                          });
  CHECK(asked == "n7");
  CHECK(values.at("master_addr") == "10.1.2.3");
}

// Kubeflow Trainer v2 sets exactly these on each pod.
TEST_CASE("Kubeflow's PET_* env alone forms a static multi-node job") {
  const Env env = {{"PET_NNODES", "2"},
                   {"PET_NPROC_PER_NODE", "auto"},
                   {"PET_NODE_RANK", "1"},
                   {"PET_MASTER_ADDR", "train-node-0-0.train"},
                   {"PET_MASTER_PORT", "29400"}};
  const auto o = parse({"--no_python", "/bin/true"}, env);
  const auto cfg = translate_options(o, host(/*gpus=*/4));
  CHECK(cfg.nproc_per_node == 4);
  CHECK(translate_options(o, host(0)).nproc_per_node == 6);  // auto: the CPUs without a GPU
  CHECK(cfg.rendezvous.backend == "static");
  CHECK(cfg.rendezvous.node_rank == 1);
  CHECK(cfg.rendezvous.min_nodes == 2);
  CHECK(cfg.rendezvous.endpoint.host == "train-node-0-0.train");
  CHECK(cfg.rendezvous.endpoint.port == 29400);
  const auto printed = parse_full({"--print-config", "x.py"}, env);
  CHECK(row(printed.text, "master_addr").second == "env PET_MASTER_ADDR");
  CHECK(row(printed.text, "nproc_per_node").second == "env PET_NPROC_PER_NODE");
}

TEST_CASE("a hosts job started inside an allocation takes no rendezvous value from Slurm") {
  const auto o = parse({"--hosts=h1,h2", "x.py"}, srun_env());
  CHECK(o.nnodes == "1:1");
  CHECK(o.node_rank == 0);
  CHECK(o.master_port == 29500);
}
