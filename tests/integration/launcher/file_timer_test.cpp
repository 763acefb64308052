// torch's FileTimer protocol under the real ddprun (docs/agent-liveness.md, "Hung
// workers: torch's FileTimer"), with workers that write the requests
// themselves, as FileTimerClient does, with values torch's client never
// sends: scopes armed absurdly far ahead, and more live scopes than ddprun keeps.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;
using namespace std::chrono_literals;

namespace {

// A shell worker: FileTimer requests as lines of `req SCOPE EXPIRATION SIGNAL`,
// then it waits for the test's go file and exits 0.
fs::path shell_worker(const TempDir& dir, const std::string& requests) {
  const auto path = dir / "worker.sh";
  write_file(path,
             "req() { printf '{\"version\": 1, \"pid\": %d, \"scope_id\": \"%s\", \"expiration_time\": %s, "
             "\"signal\": %d}\\n' $$ \"$1\" \"$2\" \"$3\" > \"$TORCHELASTIC_TIMER_FILE\"; }\n"
             "now=$(date +%s)\n" +
                 requests + "while [ ! -e '" + (dir / "go").string() + "' ]; do sleep 0.02; done\n");
  return path;
}

Process start(const TempDir& dir, const fs::path& worker) {
  return Process(
      ddprun_argv({"--standalone", "--nproc_per_node=1", "--no_python", "/bin/sh", worker.string()}),
      dir.path(), clean_env({{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}}), "ddprun");
}

// The agent serves the pipe in order: once a scope armed last (due at once,
// no signal) is reported expired, every request before it was handled.
bool probe_seen(const Process& p) { return p.err().find("scope=probe with no signal") != std::string::npos; }

}  // namespace

TEST_CASE("FileTimer scopes armed 1e12 s ahead, or at the largest double, never kill their worker") {
  TempDir dir;
  const auto worker = shell_worker(dir,
                                   "req far $((now + 1000000000000)) 9\n"
                                   "req farther 1e300 9\n"
                                   "req farthest 1.7976931348623157e308 9\n"
                                   "req probe 0 0\n");
  auto p = start(dir, worker);
  const bool seen = wait_until([&] { return probe_seen(p) || !p.running(); }, 30s);
  INFO(p.err());
  CHECK(seen);
  // A deadline that wrapped into the past is acted on before the probe's
  // (the timer takes due deadlines earliest first): by now it would be logged.
  CHECK_THAT(p.err(), !Catch::Contains("missed its deadline"));
  write_file(dir / "go", "");
  const auto code = p.wait(30s);
  INFO(p.err());
  CHECK(code == 0);
  CHECK_THAT(p.err(), !Catch::Contains("worker hung"));
}

TEST_CASE("a worker past 1024 live FileTimer scopes is warned once, and the scopes it has keep working") {
  TempDir dir;
  const auto worker = dir / "worker.py";
  write_file(worker,
             "import json, os, time\n"
             "def req(scope, expiration, sig):\n"
             "    line = json.dumps({'version': 1, 'pid': os.getpid(), 'scope_id': scope,\n"
             "                       'expiration_time': expiration, 'signal': sig}) + '\\n'\n"
             "    while True:\n"
             "        fd = os.open(os.environ['TORCHELASTIC_TIMER_FILE'], os.O_WRONLY | os.O_NONBLOCK)\n"
             "        try:\n"
             "            os.write(fd, line.encode())\n"
             "            return\n"
             "        except BlockingIOError:\n"
             "            time.sleep(0.001)  # the agent is behind: the pipe is full\n"
             "        finally:\n"
             "            os.close(fd)\n"
             "ahead = time.time() + 3600\n"
             "for i in range(1030):\n"
             "    req('scope-%d' % i, ahead, 9)\n"
             "req('scope-0', 0, 0)  # an armed scope can still be moved\n"
             "req('scope-1', -1, 0)  # released: room for one new scope\n"
             "req('probe', 0, 0)\n"
             "while not os.path.exists(os.path.join(os.path.dirname(__file__), 'go')):\n"
             "    time.sleep(0.02)\n");
  Process p(
      ddprun_argv({"--standalone", "--nproc_per_node=1", "--no_python", "/usr/bin/python3", worker.string()}),
      dir.path(), clean_env({{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}}), "ddprun");
  CHECK(wait_until([&] { return probe_seen(p) || !p.running(); }, 60s));
  write_file(dir / "go", "");
  const auto code = p.wait(30s);
  const std::string err = p.err();
  INFO(err);
  CHECK(code == 0);
  CHECK(count_lines(err, "live FileTimer scopes") == 1);
  CHECK_THAT(err, Catch::Contains("rank=0 local_rank=0 has 1024 live FileTimer scopes") &&
                      Catch::Contains("'scope-1024' is not armed"));
  CHECK_THAT(err, Catch::Contains("FileTimer expired rank=0 scope=scope-0 with no signal"));
  CHECK_THAT(err, !Catch::Contains("worker hung"));
}
