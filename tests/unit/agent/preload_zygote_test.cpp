// The preload zygote (agent/zygote/ddp_zygote.py) behind the process runner,
// with a stdlib module preloaded (no torch needed): a forked worker comes back
// with its own pid, output and exit status from under its own ddp-guard, and
// PYTHONPATH entries only the worker has behave as at a fresh start.
#include "preload_zygote.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <filesystem>

#include "ddp/common/logging.hpp"
#include "process_runner.hpp"
#include "test_support.hpp"

using namespace ddp::agent;
using ddp::test::read_file;
using ddp::test::TempDir;
using ddp::test::write_file;

namespace {

constexpr const char* kPython = "/usr/bin/python3";

struct Outcome {
  pid_t pid = -1;
  std::string error;
  std::string out;
  std::string err;
  int status = -1;
};

// Runs `script args...` forked from a zygote that preloaded json, with
// `zygote_env` for the zygote and `worker_env` for the worker.
Outcome run_forked(const TempDir& dir, const std::vector<std::string>& argv,
                   std::vector<std::string> zygote_env, std::vector<std::string> worker_env) {
  boost::asio::io_context io;
  ProcessRunner runner(io);
  PreloadZygote zygote(io, kPython, {"json"}, dir / "zygote.sock", std::move(zygote_env),
                       ddp::log::get("agent"));
  zygote.start();
  Outcome o;
  ChildHandlers h;
  h.on_output = [&](StdStream s, std::string_view b) { (s == StdStream::kOut ? o.out : o.err).append(b); };
  h.on_exit = [&](int st) {
    o.status = st;
    io.stop();
  };
  SpawnSpec spec{kPython, {"-u"}, std::move(worker_env)};
  spec.args.insert(spec.args.end(), argv.begin(), argv.end());
  ZygoteSpawn fork{argv, [&] { return zygote.connect(); }};
  runner.spawn(
      std::move(spec), std::move(h),
      [&](pid_t pid, const std::string& error) {
        o.pid = pid;
        o.error = error;
        if (pid < 0) io.stop();
      },
      {}, std::move(fork));
  io.run_for(std::chrono::seconds(60));
  return o;
}

}  // namespace

TEST_CASE("a worker forked by the preload zygote reports its own pid, output and exit status") {
  TempDir dir;
  if (::access(kPython, X_OK) != 0) {
    WARN("SKIP: no " << kPython);
    return;
  }
  const auto script = (dir / "w.py").string();
  write_file(script,
             "import os, sys\n"
             "print('pid', os.getpid(), 'json', 'json' in sys.modules, 'argv', sys.argv[1:])\n"
             "guard = open('/proc/%d/cmdline' % os.getppid()).read().replace('\\0', ' ')\n"
             "print('guard', guard)\n"
             "sys.stderr.write('to stderr\\n')\n"
             "sys.exit(3)\n");
  auto o = run_forked(dir, {script, "a b"}, {"PATH=/usr/bin:/bin"}, {"PATH=/usr/bin:/bin", "RANK=0"});
  INFO(o.out << o.err << o.error);
  REQUIRE(o.pid > 0);
  CHECK_THAT(o.out, Catch::Contains("pid " + std::to_string(o.pid) + " json True argv ['a b']"));
  // The worker's parent is its guard, which adopted it.
  CHECK_THAT(o.out, Catch::Contains("ddp-guard") && Catch::Contains("--adopt-pid=" + std::to_string(o.pid)));
  CHECK_THAT(o.err, Catch::Contains("to stderr"));
  REQUIRE(WIFEXITED(o.status));
  CHECK(WEXITSTATUS(o.status) == 3);
}

TEST_CASE("PYTHONPATH entries only a forked worker has come first on sys.path and their sitecustomize runs") {
  TempDir dir;
  if (::access(kPython, X_OK) != 0) {
    WARN("SKIP: no " << kPython);
    return;
  }
  std::filesystem::create_directories(dir / "common");
  std::filesystem::create_directories(dir / "worker_only");
  write_file(dir / "common" / "sitecustomize.py", "print('common sitecustomize ran', flush=True)\n");
  write_file(dir / "worker_only" / "sitecustomize.py",
             "import os\nprint('worker sitecustomize ran rank=' + os.environ['RANK'], flush=True)\n");
  const auto script = (dir / "w.py").string();
  write_file(script,
             "import sys\n"
             "print('path', sys.path[1:3])\n");
  const std::string common = (dir / "common").string();
  const std::string worker_only = (dir / "worker_only").string();

  SECTION("a new entry with a sitecustomize first on the path: it runs in the worker, with its env") {
    auto o = run_forked(dir, {script}, {"PATH=/usr/bin:/bin", "PYTHONPATH=" + common},
                        {"PATH=/usr/bin:/bin", "RANK=5", "PYTHONPATH=" + worker_only + ":" + common});
    INFO(o.out << o.err << o.error);
    REQUIRE(o.pid > 0);
    CHECK_THAT(o.out, Catch::Contains("worker sitecustomize ran rank=5"));
    CHECK_THAT(o.out, Catch::Contains("path ['" + worker_only + "', '" + common + "']"));
  }
  SECTION("the zygote's sitecustomize still first: not run again") {
    auto o = run_forked(dir, {script}, {"PATH=/usr/bin:/bin", "PYTHONPATH=" + common},
                        {"PATH=/usr/bin:/bin", "RANK=5", "PYTHONPATH=" + common + ":" + worker_only});
    INFO(o.out << o.err << o.error);
    REQUIRE(o.pid > 0);
    CHECK_THAT(o.out, !Catch::Contains("sitecustomize ran"));
    CHECK_THAT(o.out, Catch::Contains("path ['" + common + "', '" + worker_only + "']"));
  }
}
