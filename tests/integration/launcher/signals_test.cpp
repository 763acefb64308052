// Signals as a scheduler sends them: SIGTERM twice (each worker's checkpoint
// handler still finishes), SIGUSR1 as a preemption notice (--signals_to_handle).
#include <signal.h>

#include <catch2/catch.hpp>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;

TEST_CASE("a second SIGTERM does not cut short the workers' checkpoint handlers") {
  TempDir dir;
  // On SIGTERM: say so, then "checkpoint" until the test lets it finish.
  write_file(dir / "ckpt.py",
             "import os, signal, sys, time\n"
             "go = sys.argv[1]\n"
             "def on_term(*a):\n"
             "    print('checkpointing', flush=True)\n"
             "    while not os.path.exists(go):\n"
             "        time.sleep(0.01)\n"
             "    print('saved', flush=True)\n"
             "    sys.exit(0)\n"
             "signal.signal(signal.SIGTERM, on_term)\n"
             "print('ready', flush=True)\n"
             "while True:\n"
             "    time.sleep(1)\n");
  const std::string go = (dir / "go").string();
  Process agent(ddprun_argv({"--python", kPython, "--nproc_per_node=2", (dir / "ckpt.py").string(), go}),
                dir.path(), clean_env({}));
  REQUIRE(wait_until([&] { return count_lines(agent.out(), "ready") == 2; }, std::chrono::seconds(30)));
  agent.signal(SIGTERM);
  REQUIRE(wait_until([&] { return count_lines(agent.out(), "checkpointing") == 2; }));
  agent.signal(SIGTERM);
  REQUIRE(wait_until([&] { return agent.err().find("received SIGTERM again") != std::string::npos; }));
  write_file(go, "");
  const auto code = agent.wait(std::chrono::seconds(30));
  INFO(agent.out() << agent.err());
  CHECK(code == std::optional<int>(143));
  CHECK(count_lines(agent.out(), "saved") == 2);
}

TEST_CASE("signals_to_handle with SIGUSR1 forwards a preemption notice and the run goes on") {
  TempDir dir;
  write_file(dir / "preempt.py",
             "import signal, sys, time\n"
             "got = []\n"
             "signal.signal(signal.SIGUSR1, lambda *a: got.append(1))\n"
             "print('ready', flush=True)\n"
             "while not got:\n"
             "    time.sleep(0.01)\n"
             "print('preempted: saving and exiting', flush=True)\n");
  Process agent(ddprun_argv({"--python", kPython, "--nproc_per_node=2",
                             "--signals_to_handle=SIGTERM,SIGINT,SIGUSR1", (dir / "preempt.py").string()}),
                dir.path(), clean_env({}));
  REQUIRE(wait_until([&] { return count_lines(agent.out(), "ready") == 2; }, std::chrono::seconds(30)));
  agent.signal(SIGUSR1);
  const auto code = agent.wait(std::chrono::seconds(30));
  INFO(agent.out() << agent.err());
  CHECK(code == std::optional<int>(0));
  CHECK(count_lines(agent.out(), "preempted: saving and exiting") == 2);
}

TEST_CASE("signals_to_handle rejects what it cannot handle, naming the flag") {
  TempDir dir;
  auto r = ddprun({"--signals_to_handle=SIGTERM,SIGKILL", "/bin/true"}, dir);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("--signals_to_handle: 'SIGKILL'"));
}
