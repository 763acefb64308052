// An unmodified PyTorch DDP-style script under ddprun (Debian's python3-torch,
// gloo on CPU): init_process_group("gloo") from the env contract, all_reduce.
#include <catch2/catch.hpp>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;

namespace {
constexpr const char* kTorchPython = "/usr/bin/python3";

bool have_torch(const TempDir& dir) {
  return run({kTorchPython, "-c", "import torch.distributed"}, dir.path()).code == 0;
}
}  // namespace

TEST_CASE("a torch script joins a gloo process group from ddprun's env and all-reduces") {
  TempDir dir;
  if (!have_torch(dir)) {
    WARN("python3-torch not installed: skipped");
    return;
  }
  write_file(dir / "train.py",
             "import torch, torch.distributed as dist\n"
             "dist.init_process_group('gloo')\n"
             "t = torch.tensor([dist.get_rank() + 1.0])\n"
             "dist.all_reduce(t)\n"
             "print('rank', dist.get_rank(), 'of', dist.get_world_size(), 'sum', t.item())\n"
             "dist.destroy_process_group()\n");
  auto r = ddprun({"--python", kTorchPython, "--nproc_per_node=2", (dir / "train.py").string()}, dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("[rank 0]:rank 0 of 2 sum 3.0"));
  CHECK_THAT(r.out, Catch::Contains("[rank 1]:rank 1 of 2 sum 3.0"));
}
