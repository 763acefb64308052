// Containment of a real PyTorch worker: the DataLoader's worker processes
// (num_workers=2, forked by the training process) are gone after kill -9 of
// ddprun, like the training process itself.
#include <signal.h>

#include <catch2/catch.hpp>

#include "containment_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;

TEST_CASE("kill -9 of ddprun leaves no DataLoader worker of a torch worker") {
  // With --preload torch, the training process is forked from the preload zygote.
  const bool preload = GENERATE(false, true);
  INFO("preload=" << preload);
  TempDir dir;
  if (!have_torch(dir)) return;
  ProcessTag tag;
  // Marks itself ready once both DataLoader workers produced a batch, then
  // keeps them alive (persistent workers, prefetching) while it waits.
  write_file(dir / "train.py",
             "import os, time, torch\n"
             "from torch.utils.data import DataLoader, Dataset\n"
             "class Slow(Dataset):\n"
             "    def __len__(self): return 1000000\n"
             "    def __getitem__(self, i): return torch.tensor([float(i)])\n"
             "loader = DataLoader(Slow(), batch_size=1, num_workers=2, persistent_workers=True)\n"
             "it = iter(loader)\n"
             "next(it); next(it)\n"
             "open(os.path.join(os.environ['MARKS'], 'ready_' + os.environ['RANK']), 'w').close()\n"
             "time.sleep(1234)\n");
  std::vector<std::string> args = {"--nproc_per_node=1", "--python", kPython};
  if (preload) args.insert(args.end(), {"--preload", "torch"});
  args.push_back((dir / "train.py").string());
  Process agent(ddprun_argv(args), dir.path(), clean_env({tag.env(), {"MARKS", dir.path().string()}}));
  REQUIRE(wait_until([&] { return fs::exists(dir / "ready_0"); }, std::chrono::seconds(60)));
  if (preload) REQUIRE_THAT(agent.err(), Catch::Contains("preload zygote ready"));
  // The training process, its guard and at least the two DataLoader workers
  // (and with --preload, the zygote and its guard).
  CHECK(tag.alive().size() >= (preload ? 6U : 4U));
  agent.signal(SIGKILL);
  REQUIRE(agent.wait(std::chrono::seconds(5)));
  INFO("survivors:\n" << tag.describe());
  // Torch's own watchdog ends orphaned DataLoader workers only after about 5 s:
  // within 2 s they are gone only if ddprun's containment killed them.
  CHECK(tag.all_gone(std::chrono::seconds(2)));
}
