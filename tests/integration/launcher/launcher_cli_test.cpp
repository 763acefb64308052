// ddprun's user-facing surface: logs, prefixes, filters, python scripts,
// bad input, static multi-node.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <set>
#include <tuple>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;
using namespace std::chrono_literals;

TEST_CASE("worker lines are prefixed with the global rank and teed to per-rank log files") {
  TempDir dir;
  const auto logs = dir / "logs";
  auto r = ddprun({"--nproc_per_node=2", "--rdzv_id=logjob", "--tee=3", "--log_dir", logs.string(),
                   "--no_python", bin("fake_worker").string()},
                  dir, {{"FAKE_PRINT", "2"}});
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("[rank 0]:out 0 of rank 0\n"));
  CHECK_THAT(r.out, Catch::Contains("[rank 1]:out 1 of rank 1\n"));
  CHECK_THAT(r.err, Catch::Contains("[rank 1]:err 1 of rank 1\n"));
  CHECK(read_file(logs / "logjob" / "attempt_0" / "0" / "stdout.log") ==
        "out 0 of rank 0\nout 1 of rank 0\n");
  CHECK(read_file(logs / "logjob" / "attempt_0" / "1" / "stderr.log") ==
        "err 0 of rank 1\nerr 1 of rank 1\n");
}

TEST_CASE("redirected streams go to the files only, and the rank filter limits the console") {
  TempDir dir;
  const auto logs = dir / "logs";
  auto r = ddprun({"--nproc_per_node=3", "--rdzv_id=redir", "-r", "1", "--local_ranks_filter=1,2",
                   "--log_dir", logs.string(), "--no_python", bin("fake_worker").string()},
                  dir, {{"FAKE_PRINT", "1"}});
  REQUIRE(r.code == 0);
  CHECK(r.out.find("[rank") == std::string::npos);      // stdout redirected for every rank
  CHECK(r.err.find("[rank 0]:") == std::string::npos);  // filtered out
  CHECK_THAT(r.err, Catch::Contains("[rank 2]:err 0 of rank 2\n"));
  CHECK(read_file(logs / "redir" / "attempt_0" / "0" / "stdout.log") == "out 0 of rank 0\n");
  CHECK_FALSE(fs::exists(logs / "redir" / "attempt_0" / "0" / "stderr.log"));
}

TEST_CASE("many lines from dying workers all arrive") {
  TempDir dir;
  auto r = ddprun({"--nproc_per_node=4", "--no_python", bin("fake_worker").string()}, dir,
                  {{"FAKE_PRINT", "3000"}, {"FAKE_EXIT", "0"}});
  REQUIRE(r.code == 0);
  for (int rank = 0; rank < 4; ++rank) {
    CHECK(count_lines(r.out, "[rank " + std::to_string(rank) + "]:out ") == 3000);
  }
}

// NVML answers through bin/fake_nvml/libnvidia-ml.so.1 (fake_nvml.cpp), as
// on WSL2, which has NVML but no /proc/driver/nvidia.
TEST_CASE(
    "with --nproc_per_node=gpu or auto, the GPUs NVML sees are counted where /proc/driver/nvidia lists "
    "none") {
  if (fs::exists("/proc/driver/nvidia/gpus")) {
    SUCCEED("SKIP: this machine's driver lists its GPUs in /proc; they would be counted instead");
    return;
  }
  TempDir dir;
  const EnvOverrides nvml = {{"LD_LIBRARY_PATH", bin("fake_nvml").string()},
                             {"DDP_TEST_FAKE_NVML_GPUS", "3"}};
  for (const std::string flag : {"gpu", "auto"}) {
    auto r = ddprun({"--standalone", "--nproc_per_node=" + flag, "--log_level=info", "--no_python",
                     bin("fake_worker").string()},
                    dir, nvml);
    INFO(flag << "\n" << r.err);
    CHECK(r.code == 0);
    CHECK_THAT(r.err, Catch::Contains("all 3 local workers succeeded"));
  }
  auto with_cvd = nvml;
  with_cvd["CUDA_VISIBLE_DEVICES"] = "2";
  auto r = ddprun({"--standalone", "--nproc_per_node=gpu", "--log_level=info", "--no_python",
                   bin("fake_worker").string()},
                  dir, with_cvd);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.err, Catch::Contains("all 1 local workers succeeded"));
  // No NVML: the one-line error, exit 2.
  r = ddprun({"--standalone", "--nproc_per_node=gpu", "--no_python", bin("fake_worker").string()}, dir);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("--nproc_per_node=gpu: no CUDA device visible"));
}

TEST_CASE("a .py script runs under python3 -u with the env contract") {
  TempDir dir;
  write_file(dir / "train.py",
             "import os, sys\n"
             "print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], sys.argv[1:])\n");
  auto r = ddprun({"--nproc_per_node=2", (dir / "train.py").string(), "--lr", "0.1"}, dir);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("[rank 1]:rank 1 of 2 ['--lr', '0.1']"));
}

TEST_CASE("the legacy option passes --local_rank=N before the program's own arguments") {
  TempDir dir;
  auto r = ddprun({"--nproc_per_node=2", "--legacy_local_rank", "--no_python", bin("fake_worker").string(),
                   "--epochs", "3"},
                  dir, {{"FAKE_ENV_DUMP", dir.path().string()}});
  REQUIRE(r.code == 0);
  CHECK(read_env_dump(dir / "rank_1.env")["ARGS"] == "--local_rank=1 --epochs 3");
}

TEST_CASE("every bad input exits 2 with one line naming the flag, and starts nothing") {
  TempDir dir;
  write_file(dir / "not_exec", "#!/bin/sh\n");
  fs::copy_file(bin("fake_worker"), dir / "binary_not_exec");
  fs::permissions(dir / "binary_not_exec", fs::perms::owner_read | fs::perms::owner_write);
  const std::string worker = bin("fake_worker").string();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nproc_per_node=0", worker}, "--nproc_per_node"},
      {{"--nnodes=3:2", worker}, "--nnodes"},
      {{"--standalone", (dir / "missing_prog").string()}, "TRAINING_PROGRAM"},
      {{"--standalone", "--no_python", (dir / "not_exec").string()}, "TRAINING_PROGRAM"},
      // Neither +x nor .py, and its #! line is no python: docs/launcher-cli.md's TRAINING_PROGRAM
      // error, not a SyntaxError from python (before: ran under python, rc 1).
      {{"--standalone", (dir / "not_exec").string()},
       "TRAINING_PROGRAM: '" + (dir / "not_exec").string() +
           "' is not executable and its first line runs /bin/sh"},
      {{"--standalone", (dir / "binary_not_exec").string()}, "TRAINING_PROGRAM"},
      {{"--master_port=70000", worker}, "--master_port"},
      {{"--rdzv_backend=c10d", "--rdzv_endpoint=localhost:70000", worker}, "--rdzv_endpoint"},
      {{"--nnodes=2", "--node_rank=2", worker}, "--node_rank"},
      {{"--rdzv_conf=join_timeout=5,is_host=perhaps", worker}, "--rdzv_conf"},
      {{"--nproc_per_node=-3", worker}, "--nproc_per_node"},
      {{"--frobnicate", worker}, "--frobnicate"},
      // Bad nodes kept out and stragglers (issue 27's "Bad input").
      {{"--max_node_failures=-1", worker}, "--max_node_failures"},
      {{"--standalone", "--max_node_failures=2", worker}, "--max_node_failures"},
      {{"--node_failure_window=0", worker}, "--node_failure_window"},
      {{"--straggler_factor=1", worker}, "--straggler_factor"},
      {{"--straggler_steps=0", worker}, "--straggler_steps"},
      {{"--straggler_action=exclude", worker}, "--straggler_action"},
  };
  const auto pids = dir / "pids";
  for (const auto& [args, flag] : cases) {
    INFO(flag);
    auto r = ddprun(args, dir, {{"FAKE_PID_FILE", pids.string()}});
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(count_lines(r.err, "") == 1);
    CHECK_THAT(r.err, Catch::StartsWith("ddprun: error: " + flag));
  }
  CHECK_FALSE(fs::exists(pids));
}

TEST_CASE("a Python script without +x and without .py runs under python, saying so in one line") {
  TempDir dir;
  write_file(dir / "tool", "import os\nprint('rank', os.environ['RANK'])\n");
  auto r = ddprun(
      {"--standalone", "--nproc_per_node=1", "--python=" + std::string(kPython), (dir / "tool").string()},
      dir);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("[rank 0]:rank 0"));
  CHECK(count_lines(r.err, "is not executable and has no .py: running it as a Python script") == 1);
  // --run_path says it is Python: no line.
  auto quiet = ddprun({"--standalone", "--nproc_per_node=1", "--python=" + std::string(kPython), "--run_path",
                       (dir / "tool").string()},
                      dir);
  CHECK(quiet.code == 0);
  CHECK(count_lines(quiet.err, "not executable") == 0);
}

TEST_CASE(
    "an env switch that is not a boolean exits 2 with one line naming the variable, and starts nothing") {
  TempDir dir;
  const std::string worker = bin("fake_worker").string();
  const auto pids = dir / "pids";
  // {variable, value, what the line starts with}
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"PET_NO_PYTHON", "ture", "--no_python: 'ture' is not a boolean"},
      {"PET_STANDALONE", "maybe", "--standalone: 'maybe' is not a boolean"},
      {"DDP_NO_LEGACY_LOCAL_RANK", "", "--no_legacy_local_rank: '' is not a boolean"},
      {"DDP_SLURM", "perhaps", "env DDP_SLURM: 'perhaps' is not a boolean"},
      {"DDP_GUARD_SERVER", "sometimes", "env DDP_GUARD_SERVER: 'sometimes' is not a boolean"},
      {"TORCHELASTIC_ENABLE_FILE_TIMER", "enabled", "env TORCHELASTIC_ENABLE_FILE_TIMER: 'enabled' is not"},
  };
  for (const auto& [var, value, line] : cases) {
    INFO(var << "=" << value);
    auto r = ddprun({"--nproc_per_node=1", worker}, dir, {{"FAKE_PID_FILE", pids.string()}, {var, value}});
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(count_lines(r.err, "") == 1);
    CHECK_THAT(r.err, Catch::StartsWith("ddprun: error: " + line));
    CHECK_THAT(r.err, Catch::Contains(var));
  }
  CHECK_FALSE(fs::exists(pids));
  // The spellings that are booleans still work.
  auto on = ddprun({"--nproc_per_node=1", "/bin/true"}, dir, {{"PET_NO_PYTHON", "True"}, {"DDP_SLURM", "0"}});
  CHECK(on.code == 0);
}

TEST_CASE(
    "ddprun warns in one line that a --max_node_failures above --max_restarts can never exclude a node") {
  TempDir dir;
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  const std::vector<std::string> job = {
      "--nnodes=1",       "--rdzv_backend=c10d", "--rdzv_endpoint=" + endpoint,
      "--max_restarts=1", "--no_python",         "/bin/true"};
  auto with = [&](const std::string& k) {
    auto args = job;
    args.insert(args.begin(), "--max_node_failures=" + k);
    return ddprun(args, dir);
  };
  const auto never = with("2");
  CHECK(never.code == 0);
  CHECK(count_lines(never.err,
                    "--max_node_failures=2: the job stops when --max_restarts=1 is spent, before a "
                    "node can fail 2 times, so no node will be excluded; raise --max_restarts to at "
                    "least 2") == 1);
  const auto can = with("1");
  CHECK(can.code == 0);
  CHECK(count_lines(can.err, "--max_node_failures") == 0);
}

TEST_CASE("help and version are quick and exit 0") {
  TempDir dir;
  auto help = ddprun({"--help"}, dir);
  CHECK(help.code == 0);
  CHECK_THAT(help.out, Catch::Contains("--nproc_per_node"));
  auto version = ddprun({"--version"}, dir);
  CHECK(version.code == 0);
  CHECK_THAT(version.out, Catch::StartsWith("ddprun "));
}

TEST_CASE("two static nodes form one world of 2 x nproc with distinct ranks") {
  TempDir dir;
  const int port = free_port();
  auto node = [&](int rank) {
    return ddprun_argv({"--nnodes=2", "--node_rank=" + std::to_string(rank), "--nproc_per_node=2",
                        "--master_addr=127.0.0.1", "--master_port=" + std::to_string(port),
                        "--rdzv_conf=join_timeout=30", "--no_python", bin("fake_worker").string()});
  };
  Process n0(node(0), dir.path(), clean_env({{"FAKE_ENV_DUMP", dir.path().string()}}), "node0");
  Process n1(node(1), dir.path(), clean_env({{"FAKE_ENV_DUMP", dir.path().string()}}), "node1");
  auto c0 = n0.wait(std::chrono::seconds(60));
  auto c1 = n1.wait(std::chrono::seconds(60));
  INFO("node 0:\n" << n0.err() << "node 1:\n" << n1.err());
  REQUIRE(c0);
  REQUIRE(c1);
  CHECK(*c0 == 0);
  CHECK(*c1 == 0);
  std::set<std::string> ranks;
  for (int rank = 0; rank < 4; ++rank) {
    auto env = read_env_dump(dir / ("rank_" + std::to_string(rank) + ".env"));
    CHECK(env["WORLD_SIZE"] == "4");
    CHECK(env["GROUP_WORLD_SIZE"] == "2");
    CHECK(env["GROUP_RANK"] == std::to_string(rank / 2));
    CHECK(env["LOCAL_RANK"] == std::to_string(rank % 2));
    CHECK(env["DDP_STORE_ENDPOINT"] == "127.0.0.1:" + std::to_string(port));
    ranks.insert(env["RANK"]);
  }
  CHECK(ranks == std::set<std::string>{"0", "1", "2", "3"});
}

TEST_CASE("a worker failure on one c10d node restarts the workers of both nodes") {
  TempDir dir;
  // The store lives in ddp-rendezvousd, as on a cluster: neither agent's exit
  // can take it away from the other.
  const LocalDaemon daemon(dir);
  const int port = daemon.port;
  REQUIRE(port > 0);
  const auto pids = dir / "pids";
  auto node = [&] {
    return ddprun_argv({"--nnodes=2", "--nproc_per_node=2", "--rdzv_backend=c10d",
                        "--rdzv_endpoint=127.0.0.1:" + std::to_string(port), "--rdzv_id=fanout",
                        "--max_restarts=1", "--stop_timeout=5", "--no_python", bin("fake_worker").string()});
  };
  // Global rank 3 fails in the first attempt only, on whichever node holds it.
  const auto env = clean_env({{"FAKE_ENV_DUMP", dir.path().string()},
                              {"FAKE_PID_FILE", pids.string()},
                              {"FAKE_ONLY_RANK", "3"},
                              {"FAKE_FAIL_ON_RESTART_BELOW", "1"}});
  Process a(node(), dir.path(), env, "nodeA");
  Process b(node(), dir.path(), env, "nodeB");
  auto ca = a.wait(std::chrono::seconds(60));
  auto cb = b.wait(std::chrono::seconds(60));
  INFO(a.err() << b.err());
  REQUIRE(ca);
  REQUIRE(cb);
  CHECK(*ca == 0);
  CHECK(*cb == 0);
  // Both nodes restarted: the failing one and the one told through the store.
  CHECK_THAT(a.err(), Catch::Contains("restarting workers (1/1)"));
  CHECK_THAT(b.err(), Catch::Contains("restarting workers (1/1)"));
  CHECK(count_lines(read_file(pids), " start ") >= 6);  // a stopped worker may not have started yet
  for (int rank = 0; rank < 4; ++rank) {
    CHECK(read_env_dump(dir / ("rank_" + std::to_string(rank) + ".env"))["TORCHELASTIC_RESTART_COUNT"] ==
          "1");
  }
}

TEST_CASE("a static node left alone exits 3 naming the node ranks it waited for") {
  TempDir dir;
  auto r = ddprun({"--nnodes=2", "--node_rank=0", "--master_port=" + std::to_string(free_port()),
                   "--rdzv_conf=join_timeout=0.5", "--no_python", bin("fake_worker").string()},
                  dir);
  CHECK(r.code == 3);
  CHECK_THAT(r.err, Catch::Contains("node_rank 1"));
}

TEST_CASE("Ctrl-C while waiting for the other nodes exits 130 at once") {
  TempDir dir;
  Process agent(ddprun_argv({"--nnodes=2", "--node_rank=0", "--master_port=" + std::to_string(free_port()),
                             "--no_python", bin("fake_worker").string()}),
                dir.path(), clean_env({}));
  REQUIRE(wait_until([&] { return agent.err().find("rendezvous backend=static") != std::string::npos; }));
  agent.signal(SIGINT);
  auto code = agent.wait(std::chrono::seconds(5));
  REQUIRE(code);
  CHECK(*code == 130);
}

// torchrun 2.x flags: --duplicate_std*_filters, --virtual_local_rank,
// --shutdown_timeout (and TORCH_ELASTIC_SHUTDOWN_TIMEOUT), --print_completion.
TEST_CASE("matching lines of every rank are duplicated into the attempt's filtered logs") {
  TempDir dir;
  const auto logs = dir / "logs";
  auto r = ddprun(
      {"--nproc_per_node=2", "--rdzv_id=filt", "--log_dir", logs.string(), "--duplicate_stdout_filters",
       "loss,a,,b", "--duplicate_stderr_filters", "warn", "--no_python", "/bin/sh", "-c",
       "echo \"step loss=$RANK\"; echo noise; echo \"x a,b $RANK\"; echo warn $RANK >&2; echo other >&2"},
      dir);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("[rank 0]:noise"));  // the console still gets every line
  const std::string out = read_file(logs / "filt" / "attempt_0" / "filtered_stdout.log");
  const std::string err = read_file(logs / "filt" / "attempt_0" / "filtered_stderr.log");
  INFO(out << "--\n" << err);
  for (const std::string rank : {"0", "1"}) {
    CHECK_THAT(out, Catch::Contains("[rank " + rank + "]:step loss=" + rank + "\n"));
    CHECK_THAT(out, Catch::Contains("[rank " + rank + "]:x a,b " + rank + "\n"));  // ",," is a comma
    CHECK_THAT(err, Catch::Contains("[rank " + rank + "]:warn " + rank + "\n"));
  }
  CHECK(count_lines(out, "[rank") == 4);
  CHECK(count_lines(err, "[rank") == 2);
}

TEST_CASE("torchrun's --virtual_local_rank gives each worker LOCAL_RANK=0 and only its own GPU") {
  TempDir dir;
  const std::vector<std::string> worker = {
      "--no_python", "/bin/sh", "-c",
      "echo \"LOCAL_RANK=$LOCAL_RANK CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\""};
  std::vector<std::string> args = {"--nproc_per_node=2", "--virtual_local_rank"};
  args.insert(args.end(), worker.begin(), worker.end());
  auto r = ddprun(args, dir, {{"CUDA_VISIBLE_DEVICES", "4, 6"}});
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("[rank 0]:LOCAL_RANK=0 CUDA_VISIBLE_DEVICES=4\n"));
  CHECK_THAT(r.out, Catch::Contains("[rank 1]:LOCAL_RANK=0 CUDA_VISIBLE_DEVICES=6\n"));
  auto unset = ddprun(args, dir, {{"CUDA_VISIBLE_DEVICES", std::nullopt}});
  REQUIRE(unset.code == 0);
  CHECK_THAT(unset.out, Catch::Contains("[rank 1]:LOCAL_RANK=0 CUDA_VISIBLE_DEVICES=1\n"));
  auto few = ddprun(args, dir, {{"CUDA_VISIBLE_DEVICES", "4"}});
  CHECK(few.code == 2);
  CHECK_THAT(few.err,
             Catch::Contains("--virtual_local_rank: local rank 1 has no GPU in CUDA_VISIBLE_DEVICES=4; "
                             "fix --nproc_per_node or CUDA_VISIBLE_DEVICES"));
}

TEST_CASE(
    "torchrun's --shutdown_timeout and TORCH_ELASTIC_SHUTDOWN_TIMEOUT set the SIGTERM-to-SIGKILL grace") {
  TempDir dir;
  auto from_env =
      ddprun({"--print-config", "--standalone", "/bin/true"}, dir, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}});
  REQUIRE(from_env.code == 0);
  CHECK_THAT(from_env.out, Catch::Matches("(.|\n)*stop_timeout +7 (.|\n)*"));
  auto flag = ddprun({"--print-config", "--shutdown-timeout", "4", "--standalone", "/bin/true"}, dir,
                     {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}});
  REQUIRE(flag.code == 0);
  CHECK_THAT(flag.out, Catch::Matches("(.|\n)*stop_timeout +4 +flag(.|\n)*"));
}

TEST_CASE("torchrun's --print_completion prints a completion script with ddprun's flags") {
  TempDir dir;
  auto bash = ddprun({"--print_completion", "bash"}, dir);
  REQUIRE(bash.code == 0);
  CHECK_THAT(bash.out, Catch::Contains("complete -o filenames -F _ddprun ddprun") &&
                           Catch::Contains("--nproc_per_node") && Catch::Contains("--virtual_local_rank"));
  auto fish = ddprun({"--print_completion", "fish"}, dir);
  CHECK(fish.code == 2);
  CHECK_THAT(fish.err, Catch::Contains("--print_completion: fish not in {bash,zsh,tcsh}"));
}

// The ssh child is forked from a launcher with threads: its error after a
// failed exec is written without stdio (launcher/src/ssh_launch.cpp).
TEST_CASE("a --hostfile launch whose ssh cannot run names the command, the host and the errno text") {
  TempDir dir;
  write_file(dir / "hosts", "hostA slots=1\n");
  auto r = ddprun({"--hostfile", (dir / "hosts").string(), "--no_python", "/bin/true"}, dir,
                  {{"DDP_SSH_COMMAND", (dir / "no-such-ssh").string()}});
  CHECK(r.code == 3);
  CHECK_THAT(r.out + r.err, Catch::Contains("hostA: cannot run " + (dir / "no-such-ssh").string() +
                                            ": No such file or directory\n"));
  CHECK_THAT(r.err, Catch::Contains("ddprun: error: host hostA: ssh failed"));
}

// torchrun's workers take --local_rank; given to the launcher it abbreviates
// --local_ranks_filter (argparse reads it so too), so say so once.
TEST_CASE("a --local_rank given to ddprun warns in one line that it is read as --local_ranks_filter") {
  TempDir dir;
  auto r = ddprun({"--nproc_per_node=2", "--local_rank=0", "--no_python", bin("fake_worker").string()}, dir,
                  {{"FAKE_PRINT", "1"}});
  REQUIRE(r.code == 0);
  CHECK(count_lines(r.err, "--local_rank=0 is read as --local_ranks_filter=0 (an abbreviation)") == 1);
  CHECK_THAT(r.out, Catch::Contains("[rank 0]:out 0 of rank 0\n"));
  CHECK(r.out.find("[rank 1]:") == std::string::npos);
  // Written in full, or another abbreviation: no warning.
  auto full = ddprun({"--nproc=2", "--local_ranks_filter=0", "--no_python", "/bin/true"}, dir);
  INFO(full.err);
  REQUIRE(full.code == 0);
  CHECK(full.err.find("abbreviation") == std::string::npos);
}

TEST_CASE("ddprun started with stdin, stdout and stderr closed puts /dev/null there, not its own files") {
  TempDir dir;
  // The shell closes the three and execs ddprun: the process looked at is ddprun.
  Process agent({"/bin/sh", "-c", "exec \"$0\" \"$@\" <&- >&- 2>&-", bin("ddprun").string(), "--standalone",
                 "--nproc_per_node=1", "--no_python", "/bin/sh", "-c",
                 "touch \"$MARKS/started\"; while [ ! -f \"$MARKS/go\" ]; do sleep 0.02; done; echo done"},
                dir.path(), clean_env({{"MARKS", dir.path().string()}}));
  REQUIRE(wait_until([&] { return fs::exists(dir / "started"); }));
  // Without this, the first files ddprun opened took these numbers, and its
  // log lines and the workers' output were written into them.
  for (int fd = 0; fd <= 2; ++fd) {
    INFO("fd " << fd);
    std::error_code ec;
    CHECK(fs::read_symlink("/proc/" + std::to_string(agent.pid()) + "/fd/" + std::to_string(fd), ec) ==
          "/dev/null");
  }
  write_file(dir / "go", "");
  CHECK(agent.wait() == 0);
}

TEST_CASE("the run dir of a ddprun killed with SIGKILL is swept by the next ddprun that makes one there") {
  TempDir dir;
  const auto base = dir / "tmp";
  std::filesystem::create_directories(base);
  const auto env = clean_env({{"TMPDIR", base.string()}});
  // --standalone names each run with a fresh id: the dirs are told apart by when they appear.
  const auto run_dirs = [&] {
    std::set<std::filesystem::path> found;
    for (const auto& e : std::filesystem::directory_iterator(base))
      if (e.path().filename().string().rfind("ddprun-", 0) == 0) found.insert(e.path());
    return found;
  };
  Process killed(ddprun_argv({"--standalone", "--nproc_per_node=2", "--rdzv_id=killedjob", "--no_python",
                              "/bin/sleep", "60"}),
                 dir.path(), env, "killed");
  REQUIRE(wait_until([&] { return killed.err().find("started 2 workers") != std::string::npos; }, 30s));
  REQUIRE(run_dirs().size() == 1);
  const auto left = *run_dirs().begin();
  killed.signal(SIGKILL);
  REQUIRE(killed.wait(10s).has_value());
  // What a killed agent leaves: its lock (now free) and the files only it used.
  CHECK(std::filesystem::exists(left / "agent.lock"));
  CHECK(std::filesystem::exists(left / "fence"));
  // A running ddprun's dir is left alone.
  Process running(ddprun_argv({"--standalone", "--nproc_per_node=1", "--rdzv_id=runningjob",
                               "--log_level=debug", "--no_python", "/bin/sleep", "60"}),
                  dir.path(), env, "running");
  REQUIRE(wait_until([&] { return running.err().find("started 1 workers") != std::string::npos; }, 30s));
  REQUIRE(wait_until([&] { return !std::filesystem::exists(left); }, 10s));
  REQUIRE(run_dirs().size() == 1);
  const auto live = *run_dirs().begin();
  // Logged at debug (not in the default output) once the sweep is over, just after the dir went.
  const std::string pruned = "pruned 1 run directory in " + base.string() + " left by killed agents";
  CHECK(wait_until([&] { return running.err().find(pruned) != std::string::npos; }, 10s));
  CHECK_THAT(running.err(), Catch::Contains(pruned));
  auto next =
      ddprun({"--standalone", "--nproc_per_node=1", "--rdzv_id=nextjob", "--no_python", "/bin/sleep", "0.5"},
             dir, {{"TMPDIR", base.string()}});
  CHECK(next.code == 0);
  CHECK(std::filesystem::exists(live / "agent.lock"));
  CHECK(std::filesystem::exists(live / "fence"));
  CHECK(run_dirs() == std::set<std::filesystem::path>{live});  // a run that succeeded removes its own
  running.signal(SIGTERM);
  CHECK(running.wait(30s).has_value());
}
