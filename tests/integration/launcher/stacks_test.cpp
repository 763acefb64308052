// "Where was it stuck?": ddprun collects the local workers' stacks on SIGURG
// (and before killing a hung worker, see the torch tests): every thread's
// Python stack through faulthandler registered by ddprun's sitecustomize,
// native stacks through eu-stack or gdb. A script's own sitecustomize still runs.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "test_support.hpp"

using namespace ddp::test;
using namespace std::chrono_literals;

namespace {

bool installed(const std::string& tool) {
  for (const char* dir : {"/usr/bin", "/bin", "/usr/local/bin"}) {
    if (::access((std::string(dir) + "/" + tool).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// Sends SIGURG to a running ddprun and returns its stderr once the dump is written.
std::string dump_stacks(Process& p) {
  p.signal(SIGURG);
  REQUIRE(wait_until([&] { return p.err().find("workers' stacks written to") != std::string::npos; }, 30s));
  return p.err();
}

}  // namespace

TEST_CASE("SIGURG to ddprun writes every Python worker's stack to the run directory") {
  TempDir dir;
  write_file(dir.path() / "wait.py",
             "import time\n"
             "print('waiting', flush=True)\n"
             "def wait_here():\n"
             "    while True:\n"
             "        time.sleep(0.05)\n"
             "wait_here()\n");
  Process p({bin("ddprun").string(), "--python", "/usr/bin/python3", "--nproc_per_node=2", "--log_dir",
             (dir.path() / "logs").string(), "--rdzv_id=stacks", (dir.path() / "wait.py").string()},
            dir.path());
  REQUIRE(wait_until(
      [&] {
        const auto out = p.out();
        return out.find("[rank 0]:waiting") != std::string::npos &&
               out.find("[rank 1]:waiting") != std::string::npos;
      },
      30s));
  const auto err = dump_stacks(p);
  INFO(err);
  CHECK_THAT(
      err, Catch::Contains("[rank 0] waiting in: " + (dir.path() / "wait.py").string() + ":5 in wait_here"));
  CHECK_THAT(
      err, Catch::Contains("[rank 1] waiting in: " + (dir.path() / "wait.py").string() + ":5 in wait_here"));
  const auto stacks = read_file(dir.path() / "logs/stacks/attempt_0/stacks_0.txt");
  CHECK_THAT(stacks, Catch::Contains("=== rank 1 (local_rank 1"));
  CHECK_THAT(stacks, Catch::Contains("line 6 in <module>"));
  p.signal(SIGTERM);
  CHECK(p.wait(60s).has_value());
}

TEST_CASE("a Python script's own sitecustomize still runs under ddprun") {
  TempDir dir;
  fs::create_directories(dir.path() / "site");
  write_file(dir.path() / "site/sitecustomize.py",
             "import builtins\nbuiltins.SITE_MARK = 'user sitecustomize ran'\n");
  write_file(dir.path() / "main.py",
             "import faulthandler, sys\n"
             "print(SITE_MARK, flush=True)\n"
             "print('site path', sys.path.index(sys.argv[1]) >= 0, flush=True)\n");
  auto r = run({bin("ddprun").string(), "--python", "/usr/bin/python3", "--nproc_per_node=1",
                (dir.path() / "main.py").string(), (dir.path() / "site").string()},
               dir.path(), {{"PYTHONPATH", (dir.path() / "site").string()}}, 60s);
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("user sitecustomize ran"));
  CHECK_THAT(r.out, Catch::Contains("site path True"));
}

TEST_CASE("SIGURG to ddprun collects a native worker's stack with eu-stack or gdb") {
  if (!installed("eu-stack") && !installed("gdb")) {
    WARN("SKIP: neither eu-stack nor gdb is installed (apt install elfutils gdb)");
    return;
  }
  TempDir dir;
  Process p({bin("ddprun").string(), "--nproc_per_node=1", "--log_dir", (dir.path() / "logs").string(),
             "--rdzv_id=native", "--no_python", bin("fake_worker").string()},
            dir.path(), {{"FAKE_HANG", "1"}, {"FAKE_PRINT", "1"}});
  REQUIRE(wait_until([&] { return p.out().find("out 0 of rank 0") != std::string::npos; }, 30s));
  const auto err = dump_stacks(p);
  INFO(err);
  // The worker is blocked in pause(), called from fake_worker's main.
  CHECK_THAT(err, Catch::Contains("[rank 0] waiting in: ") && Catch::Contains("pause"));
  const auto stacks = read_file(dir.path() / "logs/native/attempt_0/stacks_0.txt");
  CHECK_THAT(stacks, Catch::Contains("native") && Catch::Contains("main"));
  p.signal(SIGTERM);
  CHECK(p.wait(60s).has_value());
}
