// ddprun's CLI -> LaunchOptions: spellings, env fallbacks, the program, prefixes.
// LaunchOptions -> AgentConfig and its bad input: translate_options_test.cpp.
#include "ddp/launcher/launch_options.hpp"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <csignal>

#include "ddp/common/error.hpp"
#include "options_fixture.hpp"
#include "test_support.hpp"

using namespace ddp::launcher;
using ddp::test::TempDir;

using namespace ddp::launcher::test;

TEST_CASE("flags parse in both spellings and with = or a space") {
  auto a = parse({"--nproc_per_node=4", "--max_restarts", "2", "--rdzv-id=job", "/bin/true"});
  auto b = parse({"--nproc-per-node", "4", "--max-restarts=2", "--rdzv_id", "job", "/bin/true"});
  for (const auto* o : {&a, &b}) {
    CHECK(o->nproc_per_node == "4");
    CHECK(o->max_restarts == 2);
    CHECK(o->rdzv_id == "job");
    CHECK(o->program == std::vector<std::string>{"/bin/true"});
  }
}

TEST_CASE("everything after the program passes through untouched") {
  auto o = parse({"--standalone", "train.py", "--lr", "0.1", "--nproc_per_node=9", "-m"});
  CHECK(o.standalone);
  CHECK(o.nproc_per_node == "1");
  CHECK(o.program == std::vector<std::string>{"train.py", "--lr", "0.1", "--nproc_per_node=9", "-m"});
  CHECK(parse({"--", "prog", "-x"}).program == std::vector<std::string>{"prog", "-x"});
}

TEST_CASE("short flags and torchrun's compatibility flags are accepted") {
  auto o = parse({"-r", "3", "-t", "0:1,1:2", "-m", "--monitor_interval=0.1", "--start_method=fork",
                  "--use_env", "pkg.train"});
  CHECK(o.redirects == "3");
  CHECK(o.tee == "0:1,1:2");
  CHECK(o.module);
  CHECK(o.monitor_interval == Approx(0.1));
  CHECK(o.use_env);
}

TEST_CASE("PET_ variables fill flags the command line lacks") {
  auto o = parse({"--max_restarts=1", "/bin/true"}, {{"PET_NPROC_PER_NODE", "3"},
                                                     {"PET_MAX_RESTARTS", "7"},
                                                     {"PET_STANDALONE", "1"},
                                                     {"PET_MASTER_PORT", "1234"},
                                                     {"PET_LOG_DIR", "/tmp/x"}});
  CHECK(o.nproc_per_node == "3");
  CHECK(o.max_restarts == 1);  // the command line wins
  CHECK(o.standalone);
  CHECK(o.master_port == 1234);
  CHECK(o.master_port_given);
  CHECK(o.log_dir == "/tmp/x");
}

TEST_CASE("a switch in the env is on for the boolean spellings of true, in any case, and off for false") {
  for (const char* on : {"1", "true", "True", "YES", "on"}) {
    INFO(on);
    CHECK(parse({"/bin/true"}, {{"PET_STANDALONE", on}}).standalone);
  }
  for (const char* off : {"0", "false", "no", "OFF"}) {
    INFO(off);
    CHECK_FALSE(parse({"/bin/true"}, {{"PET_STANDALONE", off}}).standalone);
  }
  auto first = parse_command_line({"ddprun", "--print-config", "/bin/true"}, {{"PET_STANDALONE", "no"}});
  CHECK_THAT(first.text, Catch::Contains("env PET_STANDALONE"));  // set there, even when off
}

TEST_CASE(
    "the token ddprun presents is the token file less its trailing whitespace, as the workers read it") {
  TempDir dir;
  ddp::test::write_file(dir / "token", "s3cret\r\n");
  CHECK(
      translate({"--standalone", "--token_file=" + (dir / "token").string(), "/bin/true"}).rendezvous.token ==
      "s3cret");
  ddp::test::write_file(dir / "empty", "\n");
  CHECK(error_of({"--standalone", "--token_file=" + (dir / "empty").string(), "/bin/true"}) ==
        "--token_file " + (dir / "empty").string() + ": file is empty; put the token in it");
}

TEST_CASE("help and version are answered without running anything") {
  auto help = parse_command_line({"ddprun", "--help"}, {});
  CHECK(help.kind == ParseOutcome::Kind::kHelp);
  CHECK_THAT(help.text, Catch::Contains("--nproc_per_node"));
  CHECK_THAT(help.text, Catch::Contains("--rdzv_endpoint"));
  CHECK_THAT(help.text, Catch::Contains("TRAINING_PROGRAM"));
  auto version = parse_command_line({"ddprun", "--version"}, {});
  CHECK(version.kind == ParseOutcome::Kind::kVersion);
  CHECK_THAT(version.text, Catch::StartsWith("ddprun "));
}

TEST_CASE("a flag given twice keeps its last value, as torchrun's argparse does, with a warning") {
  // A wrapper puts its defaults first; the user's own flags come after.
  const auto out = parse_command_line(
      {"ddprun", "--nproc_per_node=2", "--rdzv_conf=join_timeout=5", "--nproc-per-node", "4",
       "--rdzv_conf=join_timeout=9", "--standalone", "--standalone", "/bin/true", "--nproc_per_node=7"},
      {});
  REQUIRE(out.kind == ParseOutcome::Kind::kRun);
  CHECK(out.options.nproc_per_node == "4");
  CHECK(out.options.rdzv_conf == "join_timeout=9");
  CHECK(out.options.program == std::vector<std::string>{"/bin/true", "--nproc_per_node=7"});
  CHECK(out.warnings ==
        std::vector<std::string>{"--nproc_per_node given 2 times: the last one, 4, is used",
                                 "--rdzv_conf given 2 times: the last one, join_timeout=9, is used"});
}

TEST_CASE("an unknown option before the program is an error naming it") {
  CHECK_THROWS_WITH(parse_command_line({"ddprun", "--bogus=1", "/bin/true"}, {}),
                    Catch::StartsWith("--bogus=1: unknown option"));
  CHECK_THROWS_AS(parse_command_line({"ddprun", "--max_restarts=x", "/bin/true"}, {}), ddp::ConfigError);
}

TEST_CASE(
    "a numeric flag's value that is not a number names the flag, and the variable or file it came from") {
  CHECK_THROWS_WITH(parse_command_line({"ddprun", "--max_restarts=x", "/bin/true"}, {}),
                    Catch::Equals("--max_restarts: 'x' is not an integer"));
  CHECK_THROWS_WITH(parse_command_line({"ddprun", "--stop_timeout", "soon", "/bin/true"}, {}),
                    Catch::Equals("--stop_timeout: 'soon' is not a number"));
  CHECK_THROWS_WITH(parse_command_line({"ddprun", "/bin/true"}, {{"PET_MAX_RESTARTS", "-x"}}),
                    Catch::Equals("--max_restarts: '-x' is not an integer (from env PET_MAX_RESTARTS)"));
  CHECK_THROWS_WITH(
      parse_command_line({"ddprun", "/bin/true"}, {{"DDP_STRAGGLER_FACTOR", "2x"}}),
      Catch::Equals("--straggler_factor: '2x' is not a number (from env DDP_STRAGGLER_FACTOR)"));
  // What CLI11 converts still converts.
  CHECK(parse({"--max_restarts=0x10", "/bin/true"}).max_restarts == 16);
  CHECK(parse({"/bin/true"}, {{"PET_STOP_TIMEOUT", "1.5e1"}}).stop_timeout_s == 15.0);
}

TEST_CASE("a switch's env value that is not a boolean names the flag and the variable") {
  CHECK_THROWS_WITH(
      parse_command_line({"ddprun", "/bin/true"}, {{"PET_NO_PYTHON", "ture"}}),
      Catch::Equals("--no_python: 'ture' is not a boolean (true/false, 1/0, yes/no, on/off) (from env "
                    "PET_NO_PYTHON)"));
  CHECK_THROWS_WITH(parse_command_line({"ddprun", "/bin/true"}, {{"PET_STANDALONE", "maybe"}}),
                    Catch::StartsWith("--standalone: 'maybe' is not a boolean") &&
                        Catch::EndsWith("(from env PET_STANDALONE)"));
  CHECK_THROWS_WITH(
      parse_command_line({"ddprun", "/bin/true"}, {{"DDP_SLURM", "perhaps"}}),
      Catch::Equals("env DDP_SLURM: 'perhaps' is not a boolean (true/false, 1/0, yes/no, on/off)"));
  // The flag on the command line wins, and its env value is then not read.
  CHECK(parse({"--no_python", "/bin/true"}, {{"PET_NO_PYTHON", "ture"}}).no_python);
  CHECK(parse({"/bin/true"}, {{"PET_NO_PYTHON", "YES"}}).no_python);
  CHECK_FALSE(parse({"/bin/true"}, {{"PET_NO_PYTHON", "off"}}).no_python);
}

TEST_CASE("a .py script runs under python3 -u, a module under -m, an executable directly") {
  TempDir dir;
  ddp::test::write_file(dir / "train.py", "print(1)\n");
  auto py = translate({"--standalone", "--python=python3", (dir / "train.py").string(), "--epochs", "2"});
  CHECK(py.argv ==
        std::vector<std::string>{"/usr/bin/python3", "-u", (dir / "train.py").string(), "--epochs", "2"});
  auto mod = translate({"--standalone", "--python=python3", "-m", "pkg.train", "x"});
  CHECK(mod.argv == std::vector<std::string>{"/usr/bin/python3", "-u", "-m", "pkg.train", "x"});
  auto exe = translate({"--standalone", "true", "x"});
  CHECK(exe.argv == std::vector<std::string>{"/usr/bin/true", "x"});
  auto no_python = translate({"--standalone", "--no_python", "/bin/echo"});
  CHECK(no_python.argv == std::vector<std::string>{"/bin/echo"});
  // --no_python runs even a .py directly (its shebang), as torchrun does.
  ddp::test::write_file(dir / "tool.py", "#!/bin/sh\necho hi\n");
  ::chmod((dir / "tool.py").c_str(), 0755);
  auto shebang = translate({"--standalone", "--no_python", (dir / "tool.py").string(), "a"});
  CHECK(shebang.argv == std::vector<std::string>{(dir / "tool.py").string(), "a"});
}

TEST_CASE("the default interpreter is torchrun's, not a python3 shim first on PATH") {
  TempDir dir;
  const auto exe = [&](const std::string& rel, const std::string& text) {
    std::filesystem::create_directories((dir / rel).parent_path());
    ddp::test::write_file(dir / rel, text);
    ::chmod((dir / rel).c_str(), 0755);
  };
  // A pyenv-like shim first on PATH, torchrun (and torch) with another python.
  exe("shims/python3", "#!/usr/bin/env bash\n");
  exe("torch/bin/python3.11", "");
  exe("torch/bin/torchrun", "#!" + (dir / "torch/bin/python3.11").string() + "\nimport sys\n");
  ddp::test::write_file(dir / "train.py", "");
  HostInfo h = host();
  h.env["PATH"] = (dir / "shims").string() + ":" + (dir / "torch/bin").string();
  CHECK(translate({"--standalone", (dir / "train.py").string()}, h).argv.front() ==
        (dir / "torch/bin/python3.11").string());
  // --python (or PYTHON_EXEC) still decides.
  CHECK(translate({"--standalone", "--python=python3", (dir / "train.py").string()}, h).argv.front() ==
        (dir / "shims/python3").string());
  // A torchrun that is itself a shim (a shell script): python3 on PATH.
  exe("torch/bin/torchrun", "#!/usr/bin/env bash\nexec foo\n");
  CHECK(translate({"--standalone", (dir / "train.py").string()}, h).argv.front() ==
        (dir / "shims/python3").string());
}

TEST_CASE("the legacy option passes --local_rank right after the program") {
  TempDir dir;
  ddp::test::write_file(dir / "train.py", "");
  auto py = translate({"--standalone", "--legacy_local_rank", (dir / "train.py").string(), "--x"});
  CHECK(py.local_rank_arg_index == 2);  // python3 -u train.py <here> --x
  CHECK(translate({"--standalone", "/bin/true"}).local_rank_arg_index == -1);
}

TEST_CASE("a script that defines --local_rank gets it unless --no_legacy_local_rank") {
  TempDir dir;
  ddp::test::write_file(dir / "launch_style.py", "p.add_argument(\"--local_rank\", type=int, default=-1)\n");
  ddp::test::write_file(dir / "dashed.py", "p.add_argument('--local-rank', type=int)\n");
  ddp::test::write_file(dir / "env_style.py", "rank = int(os.environ['LOCAL_RANK'])\n");
  const auto script = [&](const char* name) { return (dir / name).string(); };
  CHECK(translate({"--standalone", script("launch_style.py"), "--x"}).local_rank_arg_index == 2);
  CHECK(translate({"--standalone", script("dashed.py")}).local_rank_arg_index == 2);
  CHECK(translate({"--standalone", script("env_style.py")}).local_rank_arg_index == -1);
  CHECK(
      translate({"--standalone", "--no_legacy_local_rank", script("launch_style.py")}).local_rank_arg_index ==
      -1);
  CHECK(translate({"--standalone", "--legacy_local_rank", script("env_style.py")}).local_rank_arg_index == 2);
  CHECK_THAT(error_of({"--legacy_local_rank", "--no_legacy_local_rank", script("dashed.py")}),
             Catch::StartsWith("--legacy_local_rank and --no_legacy_local_rank"));
}

TEST_CASE("unambiguous prefixes of long flags are accepted, as argparse does") {
  auto o = parse({"--nnode=1", "--nproc", "2", "--max_r=3", "/bin/true", "--nproc", "7"});
  CHECK(o.nnodes == "1");
  CHECK(o.nproc_per_node == "2");
  CHECK(o.max_restarts == 3);
  // The program's own arguments are untouched.
  CHECK(o.program == std::vector<std::string>{"/bin/true", "--nproc", "7"});
  CHECK(parse({"--master-addr", "h", "--rdzv-b=c10d", "/bin/true"}).rdzv_backend == "c10d");
  try {
    parse({"--no=1", "/bin/true"});
    FAIL("an ambiguous prefix was accepted");
  } catch (const ddp::ConfigError& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("--no: ambiguous option, could be --no_python, "));
    CHECK_THAT(e.what(), Catch::Contains("--node_rank"));
  }
}

TEST_CASE("torchrun flags and rdzv_conf keys ddprun has no use for are accepted") {
  auto cfg = translate({"--logs_specs=DefaultLogsSpecs", "--event_log_handler=console",
                        "--rdzv_conf=use_libuv=0,colour=red,join_timeout=7",
                        "--signals_to_handle=SIGTERM,SIGINT,SIGUSR1", "/bin/true"});
  CHECK(cfg.rendezvous.join_timeout == std::chrono::seconds(7));
  CHECK(cfg.signals_to_handle == std::vector<int>{SIGTERM, SIGINT, SIGUSR1});
}
