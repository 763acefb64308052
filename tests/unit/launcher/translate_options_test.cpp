// LaunchOptions -> AgentConfig (translate_options), including every bad input.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <csignal>

#include "ddp/common/error.hpp"
#include "ddp/launcher/launch_options.hpp"
#include "options_fixture.hpp"
#include "test_support.hpp"

using namespace ddp::launcher;
using ddp::test::TempDir;

using namespace ddp::launcher::test;

TEST_CASE("nproc_per_node takes a number, gpu, cpu or auto") {
  CHECK(translate({"--nproc_per_node=3", "/bin/true"}).nproc_per_node == 3);
  CHECK(translate({"--nproc_per_node=cpu", "/bin/true"}).nproc_per_node == 6);
  CHECK(translate({"--nproc_per_node=auto", "/bin/true"}).nproc_per_node == 6);
  CHECK(translate({"--nproc_per_node=auto", "/bin/true"}, host(2)).nproc_per_node == 2);
  CHECK(translate({"--nproc_per_node=gpu", "/bin/true"}, host(8)).nproc_per_node == 8);
  CHECK_THAT(error_of({"--nproc_per_node=gpu", "/bin/true"}),
             Catch::StartsWith("--nproc_per_node=gpu: no CUDA device"));
}

TEST_CASE("where the driver's /proc entries show no GPU, gpu and auto ask NVML") {
  HostInfo h = host();
  int asked = 0;
  h.probe_gpus = [&]() -> std::optional<int> {
    ++asked;
    return 3;
  };
  CHECK(translate({"--nproc_per_node=gpu", "/bin/true"}, h).nproc_per_node == 3);
  CHECK(translate({"--nproc_per_node=auto", "/bin/true"}, h).nproc_per_node == 3);
  CHECK(asked == 2);
  CHECK(translate({"--nproc_per_node=cpu", "/bin/true"}, h).nproc_per_node == 6);
  CHECK(translate({"--nproc_per_node=2", "/bin/true"}, h).nproc_per_node == 2);
  CHECK(asked == 2);  // only gpu and auto need a GPU count
  h.gpu_count = 8;    // /proc/driver/nvidia/gpus answers first
  CHECK(translate({"--nproc_per_node=gpu", "/bin/true"}, h).nproc_per_node == 8);
  CHECK(asked == 2);
  h.gpu_count = 0;
  h.probe_gpus = [] { return std::optional<int>(); };  // no NVML either
  CHECK(translate({"--nproc_per_node=auto", "/bin/true"}, h).nproc_per_node == 6);
  CHECK_THAT(error_of({"--nproc_per_node=gpu", "/bin/true"}, h),
             Catch::StartsWith("--nproc_per_node=gpu: no CUDA device"));
}

TEST_CASE("CUDA_VISIBLE_DEVICES narrows the GPU count") {
  CHECK(detect_gpu_count({{"CUDA_VISIBLE_DEVICES", ""}}) == 0);
  CHECK(detect_gpu_count({{"CUDA_VISIBLE_DEVICES", "-1"}}) == 0);
}

TEST_CASE("the backend follows the flags") {
  auto standalone = translate({"--standalone", "/bin/true"});
  CHECK(standalone.rendezvous.backend == "standalone");
  CHECK(standalone.rendezvous.run_id.size() == 36);
  // One node without a port asked for: a free port instead of a fixed 29500.
  CHECK(translate({"--nproc_per_node=2", "/bin/true"}).rendezvous.backend == "standalone");
  auto st =
      translate({"--nnodes=2", "--node_rank=1", "--master_addr=10.1.2.3", "--master_port=4000", "/bin/true"});
  CHECK(st.rendezvous.backend == "static");
  CHECK(st.rendezvous.endpoint.host == "10.1.2.3");
  CHECK(st.rendezvous.endpoint.port == 4000);
  CHECK(st.rendezvous.node_rank == 1);
  CHECK(st.rendezvous.min_nodes == 2);
  CHECK(st.rendezvous.is_host == false);
  const std::vector<std::string> node0 = {"--nnodes=2", "--master_addr=10.1.2.3", "--master_port=4000"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), node0.begin(), node0.end());
    extra.push_back("/bin/true");
    return translate(extra).rendezvous.is_host;
  };
  CHECK(with({}) == true);
  // A store that runs already (ddp-store, the --hosts launcher): node 0 joins it.
  CHECK(with({"--rdzv_conf=is_host=false"}) == false);
  auto dyn =
      translate({"--nnodes=1:4", "--rdzv_backend=ddp", "--rdzv_endpoint=h:1234",
                 "--rdzv_conf=join_timeout=5,last_call_timeout=0.5,keep_alive_max_attempt=2", "/bin/true"});
  CHECK(dyn.rendezvous.backend == "c10d");
  CHECK(dyn.rendezvous.endpoint.port == 1234);
  CHECK(dyn.rendezvous.min_nodes == 1);
  CHECK(dyn.rendezvous.max_nodes == 4);
  CHECK(dyn.rendezvous.join_timeout == std::chrono::seconds(5));
  CHECK(dyn.rendezvous.last_call_timeout == std::chrono::milliseconds(500));
  CHECK(dyn.rendezvous.keep_alive_max_attempt == 2);
  CHECK_FALSE(dyn.rendezvous.is_host.has_value());  // torchrun's default: host when local and free
  for (const auto& [conf, host] : {std::pair{"is_host=0", false}, std::pair{"is_host=1", true}}) {
    const auto c = translate({"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=h:1234",
                              std::string("--rdzv_conf=") + conf, "/bin/true"});
    CHECK(c.rendezvous.is_host == host);
  }
  CHECK(translate({"--rdzv_backend=c10d", "--rdzv_endpoint=h", "/bin/true"}).rendezvous.endpoint.port ==
        29400);
}

TEST_CASE("on etcd a --local_addr that does not resolve here is refused: the workers' store would be there") {
  CHECK_THAT(error_of({"--nnodes=2", "--rdzv_backend=etcd", "--rdzv_endpoint=h:2379",
                       "--local_addr=no-such-node.invalid", "/bin/true"}),
             Catch::StartsWith("--local_addr: 'no-such-node.invalid' does not resolve on this host (") &&
                 Catch::Contains("hosts the workers' store there"));
  CHECK(translate({"--nnodes=2", "--rdzv_backend=etcd-v2", "--rdzv_endpoint=h:2379", "--local_addr=127.0.0.1",
                   "/bin/true"})
            .node.host == "127.0.0.1");
  // On c10d the workers' store is the rendezvous store: the address only names the node.
  CHECK(translate({"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=h:1234",
                   "--local_addr=no-such-node.invalid", "/bin/true"})
            .node.host == "no-such-node.invalid");
}

TEST_CASE("keep_alive_max_attempt below 2 is refused: the lease would end before its renewal") {
  CHECK_THAT(
      error_of({"--rdzv_conf=keep_alive_max_attempt=1", "/bin/true"}),
      Catch::StartsWith("--rdzv_conf: keep_alive_max_attempt must be at least 2 (with 1 a node's lease"));
  CHECK_THAT(error_of({"--rdzv_conf=keep_alive_max_attempt=0", "/bin/true"}),
             Catch::StartsWith("--rdzv_conf: keep_alive_max_attempt must be at least 2"));
}

TEST_CASE("list_nodes_max sets past how many nodes a round's records are not all read, and must be >= 0") {
  CHECK(translate({"--nnodes=1:4", "--rdzv_backend=c10d", "--rdzv_endpoint=h:1234", "/bin/true"})
            .rendezvous.list_nodes_max == 128);
  CHECK(translate({"--nnodes=1:4", "--rdzv_backend=c10d", "--rdzv_endpoint=h:1234",
                   "--rdzv_conf=list_nodes_max=0", "/bin/true"})
            .rendezvous.list_nodes_max == 0);
  CHECK_THAT(error_of({"--rdzv_conf=list_nodes_max=-1", "/bin/true"}),
             Catch::StartsWith("--rdzv_conf: list_nodes_max='-1' is not an integer >= 0"));
  CHECK_THAT(error_of({"--rdzv_conf=list_nodes_max=many", "/bin/true"}),
             Catch::Contains("list_nodes_max") && Catch::Contains("an integer >= 0"));
}

TEST_CASE("logs, streams, filter and node identity reach the agent config") {
  auto c = translate({"--nproc_per_node=4", "--log_dir=rel/logs", "-r", "0:1", "-t", "3",
                      "--local_ranks_filter=0,2", "--local_addr=10.0.0.9", "--role=trainer",
                      "--stop_timeout=1.5", "/bin/true"});
  CHECK(c.log_dir.is_absolute());
  CHECK(c.redirects.for_rank(0) == ddp::agent::Std::kOut);
  CHECK(c.tee.for_rank(3) == ddp::agent::Std::kAll);
  CHECK(c.local_ranks_filter == std::vector<int>{0, 2});
  CHECK(c.node.host == "10.0.0.9");
  CHECK(c.node.node_id == "node-a_42");
  CHECK(c.node.local_world_size == 4);
  CHECK(c.role == "trainer");
  CHECK(c.stop_timeout == std::chrono::milliseconds(1500));
}

TEST_CASE("every bad input gives one line naming the flag") {
  TempDir dir;
  ddp::test::write_file(dir / "plain", "#!/bin/sh\n");
  ::chmod((dir / "plain").c_str(), 0644);
  CHECK_THAT(error_of({"--nproc_per_node=0", "/bin/true"}), Catch::StartsWith("--nproc_per_node: "));
  CHECK_THAT(error_of({"--nproc_per_node=many", "/bin/true"}), Catch::StartsWith("--nproc_per_node: "));
  CHECK_THAT(error_of({"--nnodes=3:2", "/bin/true"}), Catch::StartsWith("--nnodes: "));
  CHECK_THAT(error_of({"--nnodes=0", "/bin/true"}), Catch::StartsWith("--nnodes: "));
  CHECK_THAT(error_of({"--nnodes=a:b", "/bin/true"}), Catch::StartsWith("--nnodes: "));
  CHECK_THAT(error_of({"--standalone"}), Catch::StartsWith("TRAINING_PROGRAM: missing"));
  CHECK_THAT(error_of({"--standalone", "/no/such/prog"}), Catch::StartsWith("TRAINING_PROGRAM: "));
  CHECK_THAT(error_of({"--standalone", "no_such_prog_xyz.py"}), Catch::StartsWith("TRAINING_PROGRAM: "));
  CHECK_THAT(error_of({"--standalone", "--no_python", (dir / "plain").string()}),
             Catch::Contains("is not executable"));
  CHECK_THAT(error_of({"--master_port=70000", "/bin/true"}), Catch::StartsWith("--master_port: "));
  CHECK_THAT(error_of({"--master_port=-1", "/bin/true"}), Catch::StartsWith("--master_port: "));
  CHECK_THAT(error_of({"--rdzv_backend=c10d", "--rdzv_endpoint=h:99999", "/bin/true"}),
             Catch::StartsWith("--rdzv_endpoint"));
  CHECK_THAT(error_of({"--nnodes=2", "--node_rank=2", "/bin/true"}), Catch::StartsWith("--node_rank: "));
  CHECK_THAT(error_of({"--rdzv_conf=use_libuv=maybe", "/bin/true"}),
             Catch::StartsWith("--rdzv_conf: use_libuv='maybe' is not a boolean"));
  CHECK_THAT(error_of({"--rdzv_conf=join_timeout=soon", "/bin/true"}), Catch::StartsWith("--rdzv_conf: "));
  CHECK_THAT(error_of({"--rdzv_backend=zookeeper", "/bin/true"}), Catch::StartsWith("--rdzv_backend: "));
  CHECK_THAT(error_of({"--rdzv_backend=c10d", "/bin/true"}), Catch::StartsWith("--rdzv_endpoint: "));
  CHECK_THAT(error_of({"--max_restarts=-1", "/bin/true"}), Catch::StartsWith("--max_restarts: "));
  CHECK_THAT(error_of({"--standalone", "--nnodes=2", "/bin/true"}), Catch::StartsWith("--standalone: "));
  CHECK_THAT(error_of({"--nnodes=1:2", "--master_port=5000", "/bin/true"}), Catch::StartsWith("--nnodes: "));
  CHECK_THAT(error_of({"-t", "5", "/bin/true"}), Catch::StartsWith("--tee: "));
  CHECK_THAT(error_of({"--nproc_per_node=2", "--local_ranks_filter=3", "/bin/true"}),
             Catch::StartsWith("--local_ranks_filter: "));
  ddp::test::write_file(dir / "t.py", "");
  CHECK_THAT(error_of({"--python=nopython3", (dir / "t.py").string()}), Catch::StartsWith("--python: "));
  CHECK_THAT(error_of({"--token_file=/no/such/token", "/bin/true"}),
             Catch::StartsWith("--token_file /no/such/token: cannot read: "));
}

TEST_CASE("a duration too long for its flag is refused naming the flag and the longest accepted") {
  CHECK_THAT(error_of({"--stop_timeout=1e300", "/bin/true"}),
             Catch::StartsWith("--stop_timeout: ") && Catch::Contains("longer than 1099511627 s"));
  CHECK_THAT(error_of({"--stop_timeout=1e16", "/bin/true"}), Catch::StartsWith("--stop_timeout: "));
  CHECK_THAT(error_of({"--stop_timeout=-1", "/bin/true"}), Catch::StartsWith("--stop_timeout: "));
  CHECK(translate({"--stop_timeout=1e9", "/bin/true"}).stop_timeout == std::chrono::seconds(1'000'000'000));
  CHECK_THAT(error_of({"--rdzv_conf=join_timeout=1e12", "/bin/true"}),
             Catch::StartsWith("--rdzv_conf: join_timeout") && Catch::Contains("longer than 1099511627 s"));
  // The keep-alive window (interval x attempts) is a lease TTL in the store,
  // which keeps a lease at most a year.
  for (const char* conf :
       {"keep_alive_interval=1e9,keep_alive_max_attempt=2000000000", "keep_alive_interval=40000000",
        "keep_alive_interval=1e9,keep_alive_max_attempt=9000"}) {
    INFO(conf);
    CHECK_THAT(error_of({std::string("--rdzv_conf=") + conf, "/bin/true"}),
               Catch::StartsWith("--rdzv_conf: keep_alive_interval") && Catch::Contains("one year"));
  }
  const auto c =
      translate({"--rdzv_conf=keep_alive_interval=100000,keep_alive_max_attempt=300", "/bin/true"});
  CHECK(c.rendezvous.keep_alive_interval == std::chrono::seconds(100000));
}

TEST_CASE("PYTHON_EXEC picks the interpreter as under torchrun, and --python overrides it") {
  auto from_env = parse_command_line({"ddprun", "train.py"}, {{"PYTHON_EXEC", "/opt/py/bin/python3"}});
  CHECK(from_env.options.python == "/opt/py/bin/python3");
  auto flag = parse_command_line({"ddprun", "--python=/usr/bin/python3", "train.py"},
                                 {{"PYTHON_EXEC", "/opt/py/bin/python3"}});
  CHECK(flag.options.python == "/usr/bin/python3");
  CHECK(parse_command_line({"ddprun", "train.py"}, {}).options.python.empty());  // torchrun's, or python3
}

TEST_CASE("print-config names the torchrun variable a value came from, not the one it stands for") {
  auto row = [](const std::map<std::string, std::string>& env, const std::string& option) {
    const auto text = parse_command_line({"ddprun", "--print-config", "train.py"}, env).text;
    const auto at = text.find("\n" + option + " ");
    REQUIRE(at != std::string::npos);
    return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  };
  CHECK_THAT(row({{"PYTHON_EXEC", "/opt/py/bin/python3"}}, "python"),
             Catch::Contains("/opt/py/bin/python3") && Catch::EndsWith("env PYTHON_EXEC"));
  CHECK_THAT(row({{"PYTHON_EXEC", "/opt/py/bin/python3"}, {"DDP_PYTHON", "/usr/bin/python3"}}, "python"),
             Catch::Contains("/usr/bin/python3") && Catch::EndsWith("env DDP_PYTHON"));
  CHECK_THAT(row({{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}}, "stop_timeout"),
             Catch::EndsWith("env TORCH_ELASTIC_SHUTDOWN_TIMEOUT"));
  CHECK_THAT(row({{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[${rank}]"}}, "log_line_prefix_template"),
             Catch::EndsWith("env TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"));
  // A bad value names it too.
  CHECK_THROWS_WITH(parse_command_line({"ddprun", "/bin/true"}, {{"PET_SHUTDOWN_TIMEOUT", "soon"}}),
                    Catch::EndsWith("(from env PET_SHUTDOWN_TIMEOUT)"));
}

TEST_CASE(
    "rdzv_conf torch_legacy_protocol picks how the hosted store reads TCPStore clients without VALIDATE") {
  using ddp::store::TorchLegacyProtocol;
  auto legacy = [](const std::string& value) {
    return translate({"--standalone", "--rdzv_conf=torch_legacy_protocol=" + value, "/bin/true"})
        .rendezvous.torch_legacy_protocol;
  };
  CHECK(translate({"--standalone", "/bin/true"}).rendezvous.torch_legacy_protocol ==
        TorchLegacyProtocol::kTorch1);
  CHECK(legacy("1") == TorchLegacyProtocol::kTorch1);
  // A real torch 2.0.1 client speaks the 1.x numbering (DELETE_KEY = 8); 2.1.2 has its own.
  CHECK(legacy("2.0") == TorchLegacyProtocol::kTorch1);
  CHECK(legacy("2.1") == TorchLegacyProtocol::kTorch21);
  for (const std::string bad : {"2.2", "2", "1.13", "3"}) {
    INFO(bad);
    CHECK_THAT(error_of({"--rdzv_conf=torch_legacy_protocol=" + bad, "/bin/true"}),
               Catch::StartsWith("--rdzv_conf: torch_legacy_protocol='" + bad + "'") &&
                   Catch::Contains("use 1 (torch 1.x), 2.0 or 2.1"));
  }
}

TEST_CASE(
    "the preload option names modules for a script's workers, from the flag, PET_PRELOAD or a config file") {
  TempDir dir;
  ddp::test::write_file(dir / "train.py", "print(1)\n");
  const auto script = (dir / "train.py").string();
  CHECK(translate({"--standalone", "--python=python3", "--preload", "torch,numpy.linalg", script}).preload ==
        std::vector<std::string>{"torch", "numpy.linalg"});
  CHECK(translate({"--standalone", "--python=python3", script}).preload.empty());
  const auto from_env = parse({"--standalone", script}, {{"PET_PRELOAD", "torch"}});
  CHECK(from_env.preload == "torch");
  ddp::test::write_file(dir / "c.json", "{\"preload\": \"torch\"}\n");
  const auto shown =
      parse_command_line({"ddprun", "--config", (dir / "c.json").string(), "--print-config", script}, {});
  CHECK_THAT(shown.text, Catch::Contains("preload") && Catch::Contains("torch"));
  // -m modules and executables start normally.
  CHECK(translate({"--standalone", "--python=python3", "--preload", "torch", "-m", "pkg.train"})
            .preload.empty());
  CHECK(translate({"--standalone", "--preload", "torch", "true"}).preload.empty());
  REQUIRE_THAT(error_of({"--standalone", "--python=python3", "--preload", "torch,../evil", script}),
               Catch::StartsWith("--preload: '../evil' is not a Python module name"));
}

TEST_CASE("node exclusion flags reach the agent config, and out-of-range values name their flag") {
  const auto off = translate({"/bin/true"});
  CHECK(off.max_node_failures == 0);
  CHECK(off.node_failure_window == std::chrono::hours(1));
  const auto on = translate({"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=head:29400",
                             "--max_node_failures=3", "--node_failure_window=600", "/bin/true"});
  CHECK(on.max_node_failures == 3);
  CHECK(on.node_failure_window == std::chrono::minutes(10));
  // One node against a daemon: its exclusion outlives it and keeps the host out.
  CHECK(translate({"--nnodes=1", "--rdzv_backend=c10d", "--rdzv_endpoint=head:29400", "--max_node_failures=1",
                   "/bin/true"})
            .max_node_failures == 1);
  // One node with its own store: excluding it could only end the job.
  CHECK_THAT(error_of({"--standalone", "--max_node_failures=2", "/bin/true"}),
             Catch::StartsWith("--max_node_failures: --standalone runs one node with its own store, so "
                               "excluding it could only end the job; drop the flag"));
  CHECK_THAT(error_of({"--max_node_failures=2", "/bin/true"}),
             Catch::StartsWith("--max_node_failures: --nnodes=1:1 without --rdzv_endpoint runs one node"));
  CHECK(translate({"--standalone", "--max_node_failures=0", "/bin/true"}).max_node_failures == 0);
  CHECK_THAT(error_of({"--max_node_failures=-1", "/bin/true"}),
             Catch::StartsWith("--max_node_failures: -1 must be >= 0"));
  CHECK_THAT(error_of({"--node_failure_window=0", "/bin/true"}),
             Catch::StartsWith("--node_failure_window: must be a number of seconds > 0"));
  CHECK_THAT(error_of({"--node_failure_window=soon", "/bin/true"}),
             Catch::StartsWith("--node_failure_window: "));
}

TEST_CASE("on_failure is restart by default, reform on request, and nothing else") {
  CHECK(translate({"--standalone", "/bin/true"}).on_failure == ddp::agent::OnFailure::kRestart);
  CHECK(translate({"--standalone", "--on_failure=reform", "/bin/true"}).on_failure ==
        ddp::agent::OnFailure::kReform);
  CHECK(translate({"--standalone", "--on-failure", "restart", "/bin/true"}).on_failure ==
        ddp::agent::OnFailure::kRestart);
  CHECK(error_of({"--standalone", "--on_failure=shrink", "/bin/true"}) ==
        "--on_failure: 'shrink' is not restart or reform");
}
