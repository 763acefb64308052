// ddprun at a terminal with real torch workers (gloo on CPU): the workers see
// the terminal, and Ctrl-C in the middle of their collectives ends the job at
// once with nothing left behind. Runs with Debian's torch 1.13 (label torch)
// and with torch 2.x of .venv (label torch2: DDP_TEST_PYTHON names it).
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdlib>

#include "containment_util.hpp"
#include "launcher_test_util.hpp"
#include "pty_session.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;

namespace {

std::string python() {
  const char* p = std::getenv("DDP_TEST_PYTHON");
  return p != nullptr && *p != '\0' ? p : kPython;
}

}  // namespace

TEST_CASE("torch workers at a terminal see it, and Ctrl-C in their all_reduce loop ends the job at once") {
  TempDir dir;
  if (!have_torch(dir, python())) return;
  write_file(
      dir / "loop.py",
      "import sys, torch, torch.distributed as dist\n"
      "dist.init_process_group('gloo')\n"
      "r = dist.get_rank()\n"
      "print(f'rank={r} stdout_tty={sys.stdout.isatty()} stderr_tty={sys.stderr.isatty()}', flush=True)\n"
      "t = torch.ones(1)\n"
      "i = 0\n"
      "while True:\n"
      "    dist.all_reduce(t)\n"
      "    i += 1\n"
      "    if i == 200:\n"
      "        print(f'looping rank={r}', flush=True)\n");
  ProcessTag tag;
  PtySession s(ddprun_argv({"--python", python(), "--log_level=warn", "--nproc_per_node=2",
                            (dir / "loop.py").string()}),
               dir.path().string(), clean_env({tag.env()}));
  REQUIRE(s.wait_for("[rank 0]:rank=0 stdout_tty=True stderr_tty=True", std::chrono::seconds(60)));
  REQUIRE(s.wait_for("[rank 1]:rank=1 stdout_tty=True stderr_tty=True", std::chrono::seconds(60)));
  REQUIRE(s.wait_for("[rank 0]:looping rank=0", std::chrono::seconds(60)));
  REQUIRE(s.wait_for("[rank 1]:looping rank=1", std::chrono::seconds(60)));
  REQUIRE(tag.alive().size() >= 3);  // ddprun and its two workers (and their guards)
  const auto start = std::chrono::steady_clock::now();
  s.type("\x03");
  const auto code = s.wait(std::chrono::seconds(60));
  const auto took = std::chrono::steady_clock::now() - start;
  INFO(s.screen());
  CHECK(code == std::optional<int>(130));
  // At once: the workers die of the SIGINT in their collectives, no grace period.
  CHECK(took < std::chrono::seconds(10));
  const bool gone = tag.all_gone();
  INFO("left running:\n" << tag.describe());
  CHECK(gone);
}
