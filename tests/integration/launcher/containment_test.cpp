// Process containment: whatever a worker starts (a shell's background job, a
// child that calls setsid, a double fork) is gone when ddprun is done with the
// worker — after kill -9 of ddprun, after SIGTERM/SIGHUP/double SIGINT, when
// the worker exits 0 and when it is killed from outside. Every process carries
// the test's own DDP_TEST_TAG; a test fails if any tagged process survives.
#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <thread>

#include "containment_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;

namespace {

// SHAPE picks what the worker leaves behind: a background job of the shell, a
// child in its own session, an orphan of a double fork, or all three. The
// setsid and double-fork children ignore SIGTERM, SIGHUP and SIGINT, so only
// a SIGKILL aimed at them (not at the worker's process group) ends them.
constexpr const char* kWorker = R"(#!/bin/sh
[ -n "$IGNORE_INT" ] && trap "" INT
echo $$ > "$MARKS/pid_$RANK"
case "$SHAPE" in
  shell|all) sleep 1234 & ;;
esac
case "$SHAPE" in
  setsid|all) setsid sh -c 'trap "" TERM HUP INT; exec sleep 1234' & ;;
esac
case "$SHAPE" in
  double_fork|all) ( trap "" TERM HUP INT; sleep 1234 & ) ;;
esac
touch "$MARKS/ready_$RANK"
[ -n "$EXIT_NOW" ] && exit "$EXIT_NOW"
wait
exec sleep 1234
)";

// With --preload: a Python script forked from the preload zygote that becomes
// the shell worker above (exec keeps its pid), so the same trees grow from a
// forked worker.
constexpr const char* kPythonWorker = "import os, sys\nos.execv('/bin/sh', ['/bin/sh', sys.argv[1]])\n";

struct Job {
  TempDir dir;
  ProcessTag tag;
  std::string script;

  Job() {
    script = (dir / "worker.sh").string();
    write_file(script, kWorker);
    ::chmod(script.c_str(), 0755);
  }

  std::unique_ptr<Process> start(const std::string& shape, std::vector<std::string> flags,
                                 EnvOverrides extra = {}, bool preload = false) {
    std::vector<std::string> args = {"--nproc_per_node=2"};
    args.insert(args.end(), flags.begin(), flags.end());
    if (preload) {
      write_file(dir / "worker.py", kPythonWorker);
      args.insert(args.end(),
                  {"--python", kPython, "--preload", "json", (dir / "worker.py").string(), script});
    } else {
      args.insert(args.end(), {"--no_python", "/bin/sh", script});
    }
    EnvOverrides env = {tag.env(), {"SHAPE", shape}, {"MARKS", dir.path().string()}};
    for (auto& [k, v] : extra) env[k] = v;
    return std::make_unique<Process>(ddprun_argv(args), dir.path(), clean_env(env));
  }

  // The directory of the cgroup v2 ddp-guard made for the worker with `pid`
  // ("" when it made none), and with --preload the zygote's around it.
  static std::vector<fs::path> guard_cgroups(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
    std::string line;
    std::vector<fs::path> out;
    while (std::getline(in, line)) {
      if (line.rfind("0::/", 0) != 0) continue;
      for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
        fs::path dir = fs::path(root) / line.substr(4);
        if (line.size() <= 4 || !fs::exists(dir)) continue;
        for (; dir.filename().string().rfind("ddp-guard.", 0) == 0; dir = dir.parent_path())
          out.push_back(dir);
      }
    }
    return out;
  }

  bool ready() const {
    return wait_until([&] { return fs::exists(dir / "ready_0") && fs::exists(dir / "ready_1"); });
  }
};

}  // namespace

TEST_CASE("kill -9 of ddprun leaves no process of any worker's tree") {
  const auto shape = GENERATE(as<std::string>{}, "shell", "setsid", "double_fork");
  // Guards forked by the guard server (the default), exec'd one by one, or
  // forked by the preload zygote.
  const auto start = GENERATE(as<std::string>{}, "served", "exec", "preload");
  const bool preload = start == "preload";
  INFO("shape=" << shape << " start=" << start);
  Job job;
  auto agent = job.start(shape, {}, {{"DDP_GUARD_SERVER", start == "exec" ? "0" : "1"}}, preload);
  REQUIRE(job.ready());
  if (preload) REQUIRE_THAT(agent->err(), Catch::Contains("preload zygote ready"));
  const auto cgroups = Job::guard_cgroups(std::stoi(read_file(job.dir / "pid_0")));
  agent->signal(SIGKILL);
  REQUIRE(agent->wait(std::chrono::seconds(5)));
  INFO("survivors:\n" << job.tag.describe());
  CHECK(job.tag.all_gone());
  // The cgroups the guards made are removed too (none where the hierarchy is not writable).
  for (const auto& dir : cgroups) {
    INFO("cgroup " << dir);
    CHECK(wait_until([&] { return !fs::exists(dir); }));
  }
}

// The guard server's children are the guards: it lives in ddprun's process
// tree, never in a worker's.
pid_t guard_server_of(pid_t agent) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmdline = read_file(entry.path() / "cmdline");
    std::string stat = read_file(entry.path() / "stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos || cmdline.find("--serve-fd=") == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == agent) return std::stoi(name);
  }
  return -1;
}

TEST_CASE(
    "the guard server ignores job-wide signals, and kill -9 of it stops every worker's tree before a restart "
    "under another") {
  Job job;
  auto agent = job.start("all", {"--stop_timeout=1", "--max_restarts=1"});
  REQUIRE(job.ready());
  const pid_t server = guard_server_of(agent->pid());
  REQUIRE(server > 0);
  const std::string first_worker = read_file(job.dir / "pid_0");
  // What scancel or a kill of the session sends every process leaves it running.
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGQUIT, SIGPIPE}) ::kill(server, sig);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  REQUIRE(pid_alive(server));
  CHECK(pid_alive(std::stoi(first_worker)));
  CHECK(agent->err().find("is gone") == std::string::npos);
  fs::remove(job.dir / "ready_0");
  fs::remove(job.dir / "ready_1");
  ::kill(server, SIGKILL);
  // The restarted workers mark themselves ready again, under a new server.
  REQUIRE(job.ready());
  CHECK(read_file(job.dir / "pid_0") != first_worker);
  const pid_t second = guard_server_of(agent->pid());
  CHECK(second > 0);
  CHECK(second != server);
  CHECK_THAT(agent->err(),
             Catch::Contains("the ddp-guard server (pid " + std::to_string(server) +
                             ") is gone: each guard it started has killed its worker's whole tree"));
  agent->signal(SIGTERM);
  const auto code = agent->wait(std::chrono::seconds(20));
  INFO(agent->err());
  REQUIRE(code);
  CHECK(*code == 128 + SIGTERM);
  INFO("survivors:\n" << job.tag.describe());
  CHECK(job.tag.all_gone(std::chrono::seconds(2)));
}

TEST_CASE("SIGTERM and SIGHUP stop children that called setsid or double-forked") {
  const auto sig = GENERATE(SIGTERM, SIGHUP);
  const bool preload = GENERATE(false, true);
  INFO("signal=" << sig << " preload=" << preload);
  Job job;
  auto agent = job.start("all", {"--stop_timeout=1"}, {}, preload);
  REQUIRE(job.ready());
  agent->signal(sig);
  const auto code = agent->wait(std::chrono::seconds(20));
  INFO(agent->err());
  REQUIRE(code);
  CHECK(*code == 128 + sig);
  INFO("survivors:\n" << job.tag.describe());
  CHECK(job.tag.all_gone(std::chrono::seconds(2)));
}

TEST_CASE("a second SIGINT kills children that called setsid or double-forked at once") {
  Job job;
  auto agent = job.start("all", {"--stop_timeout=60"}, {{"IGNORE_INT", "1"}});
  REQUIRE(job.ready());
  agent->signal(SIGINT);
  REQUIRE(wait_until([&] { return agent->err().find("received SIGINT") != std::string::npos; }));
  agent->signal(SIGINT);
  const auto code = agent->wait(std::chrono::seconds(20));
  INFO(agent->err());
  REQUIRE(code);
  CHECK(*code == 130);
  INFO("survivors:\n" << job.tag.describe());
  CHECK(job.tag.all_gone(std::chrono::seconds(2)));
}

TEST_CASE("a worker that exits 0 while its child runs: ddprun exits 0 and the child is stopped") {
  Job job;
  auto agent = job.start("setsid", {"--stop_timeout=1"}, {{"EXIT_NOW", "0"}});
  const auto code = agent->wait(std::chrono::seconds(30));
  INFO(agent->err());
  REQUIRE(code);
  CHECK(*code == 0);
  CHECK_THAT(agent->err(), Catch::Contains("exited; stopping 1 process(es) it left running"));
  INFO("survivors:\n" << job.tag.describe());
  CHECK(job.tag.all_gone(std::chrono::seconds(2)));
}

TEST_CASE("a worker SIGKILLed from outside: ddprun exits 1 and the worker's children are stopped") {
  const bool preload = GENERATE(false, true);
  INFO("preload=" << preload);
  Job job;
  auto agent = job.start("all", {"--stop_timeout=1"}, {}, preload);
  REQUIRE(job.ready());
  const pid_t worker = std::stoi(read_file(job.dir / "pid_0"));
  ::kill(worker, SIGKILL);
  const auto code = agent->wait(std::chrono::seconds(30));
  INFO(agent->err());
  REQUIRE(code);
  CHECK(*code == 1);
  CHECK_THAT(agent->err(), Catch::Contains("pid=" + std::to_string(worker)));
  CHECK_THAT(agent->err(), Catch::Contains("SIGKILL"));
  INFO("survivors:\n" << job.tag.describe());
  CHECK(job.tag.all_gone(std::chrono::seconds(2)));
}
