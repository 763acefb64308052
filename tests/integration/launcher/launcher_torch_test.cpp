// An unmodified PyTorch DDP-style script under ddprun (Debian's python3-torch,
// gloo on CPU): init_process_group("gloo") from the env contract, all_reduce.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstdlib>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;

namespace {
// `nproc` workers of the torch script dir/`script` under ddprun; the job must
// exit 0. Its output, for the test to check what the ranks printed.
RunResult torch_job_ok(const TempDir& dir, int nproc, const std::string& script) {
  auto r = ddprun({"--python", kPython, "--nproc_per_node=" + std::to_string(nproc), (dir / script).string()},
                  dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  return r;
}
}  // namespace

TEST_CASE("a torch script joins a gloo process group from ddprun's env and all-reduces") {
  TempDir dir;
  if (!have_torch(dir)) return;
  write_file(dir / "train.py",
             "import torch, torch.distributed as dist\n"
             "dist.init_process_group('gloo')\n"
             "t = torch.tensor([dist.get_rank() + 1.0])\n"
             "dist.all_reduce(t)\n"
             "print('rank', dist.get_rank(), 'of', dist.get_world_size(), 'sum', t.item())\n"
             "dist.destroy_process_group()\n");
  const auto r = torch_job_ok(dir, 2, "train.py");
  CHECK_THAT(r.out, Catch::Contains("[rank 0]:rank 0 of 2 sum 3.0"));
  CHECK_THAT(r.out, Catch::Contains("[rank 1]:rank 1 of 2 sum 3.0"));
}

TEST_CASE("a torch script that destroys its process group and inits it again gets a fresh group each time") {
  TempDir dir;
  if (!have_torch(dir)) return;
  // torch writes the same store keys at every init; rank 2 lags, so the others
  // are already in their next init while it still holds the last one.
  write_file(dir / "reinit.py",
             "import faulthandler, time, torch, torch.distributed as dist\n"
             "faulthandler.dump_traceback_later(120, exit=True)\n"
             "for i in range(3):\n"
             "    dist.init_process_group('gloo')\n"
             "    t = torch.tensor([dist.get_rank() + 10.0 * i])\n"
             "    dist.all_reduce(t)\n"
             "    print('init', i, 'rank', dist.get_rank(), 'sum', t.item(), flush=True)\n"
             "    if dist.get_rank() == 2:\n"
             "        time.sleep(0.3)\n"
             "    dist.destroy_process_group()\n");
  const auto r = torch_job_ok(dir, 3, "reinit.py");
  for (int rank = 0; rank < 3; ++rank) {
    CHECK_THAT(r.out, Catch::Contains("init 0 rank " + std::to_string(rank) + " sum 3.0"));
    CHECK_THAT(r.out, Catch::Contains("init 1 rank " + std::to_string(rank) + " sum 33.0"));
    CHECK_THAT(r.out, Catch::Contains("init 2 rank " + std::to_string(rank) + " sum 63.0"));
  }
}

TEST_CASE("a torch.distributed.launch script that parses --local_rank runs distributed") {
  TempDir dir;
  if (!have_torch(dir)) return;
  // The tutorials' style: --local_rank from argparse, -1 meaning "not distributed".
  write_file(dir / "launch_style.py",
             "import argparse, torch, torch.distributed as dist\n"
             "p = argparse.ArgumentParser()\n"
             "p.add_argument('--local_rank', type=int, default=-1)\n"
             "p.add_argument('--epochs', type=int)\n"
             "a = p.parse_args()\n"
             "if a.local_rank == -1:\n"
             "    print('not distributed')\n"
             "else:\n"
             "    dist.init_process_group('gloo')\n"
             "    print('local_rank', a.local_rank, 'world', dist.get_world_size(), 'epochs', a.epochs)\n"
             "    dist.destroy_process_group()\n");
  // The tutorials' own abbreviations, as argparse accepts them.
  auto r = ddprun(
      {"--python", kPython, "--nnode=1", "--nproc", "2", (dir / "launch_style.py").string(), "--epochs", "3"},
      dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("[rank 0]:local_rank 0 world 2 epochs 3"));
  CHECK_THAT(r.out, Catch::Contains("[rank 1]:local_rank 1 world 2 epochs 3"));
  // One line says what ddprun decided and how to undo it.
  CHECK(count_lines(r.err, "passing --local_rank=N to") == 1);
  CHECK_THAT(r.err, Catch::Contains("--no_legacy_local_rank"));

  auto off = ddprun({"--python", kPython, "--no_legacy_local_rank", "--nproc_per_node=2",
                     (dir / "launch_style.py").string()},
                    dir);
  REQUIRE(off.code == 0);
  CHECK(count_lines(off.out, "not distributed") == 2);
}

TEST_CASE(
    "without --python a torch script runs under torchrun's interpreter, whatever python3 is first on PATH") {
  TempDir dir;
  if (!have_torch(dir)) return;
  // A python3 first on PATH that cannot import torch, as a pyenv shim can be.
  write_file(dir / "shims/python3", "#!/bin/sh\necho 'No module named torch' >&2\nexit 1\n");
  ::chmod((dir / "shims/python3").c_str(), 0755);
  write_file(dir / "train.py",
             "import sys, torch\n"
             "print('torch', torch.__version__.split('.')[0], 'under', sys.executable)\n");
  const std::string path = (dir / "shims").string() + ":" + std::getenv("PATH");
  auto r = ddprun({(dir / "train.py").string()}, dir, {{"PATH", path}, {"PYTHON_EXEC", std::nullopt}});
  INFO(r.err);
  if (r.code != 0 && r.err.find("shims/python3") != std::string::npos) {
    WARN("no torchrun on PATH to take the interpreter from: skipped");
    return;
  }
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("[rank 0]:torch "));
}

TEST_CASE("a worker failing on an import names the interpreter and how to choose another") {
  TempDir dir;
  write_file(dir / "train.py", "import no_such_module_for_ddprun\n");
  auto r = ddprun({"--python", kPython, (dir / "train.py").string()}, dir);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains(std::string("the workers ran ") + kPython +
                                    ", which could not import a module; choose the interpreter "
                                    "with --python PATH (or PYTHON_EXEC)"));
}
