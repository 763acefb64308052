// Stale guard cgroups: SIGKILL ddprun and every ddp-guard at the same moment
// and nobody is left to kill what the workers started. Those processes stay,
// in the cgroups the guards made. The next ddprun on the node, and a ddp-guard
// on its next start, must find the cgroups whose guard is gone, kill what is
// in them, remove them, and say so once per cgroup.
//
// Registered RUN_SERIAL: any ddprun started meanwhile by another test would
// clean these cgroups up first, and the line this test looks for would be in
// that test's output instead.
#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "containment_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;

namespace {

// Each worker leaves two processes that the guard alone would kill: a child in
// its own session and the orphan of a double fork, both ignoring SIGTERM.
constexpr const char* kWorker = R"(#!/bin/sh
echo $$ > "$MARKS/pid_$RANK"
setsid sh -c 'trap "" TERM HUP INT; exec sleep 1234' &
( trap "" TERM HUP INT; sleep 1234 & )
touch "$MARKS/ready_$RANK"
exec sleep 1234
)";

// State letter and parent of a process, from /proc/PID/stat.
std::pair<char, pid_t> stat_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return {'?', -1};
  std::istringstream rest(text.substr(close + 2));
  char state = '?';
  pid_t ppid = -1;
  rest >> state >> ppid;
  return {state, ppid};
}

int sleeping(const ProcessTag& tag) {
  int n = 0;
  for (pid_t pid : tag.alive()) n += read_file("/proc/" + std::to_string(pid) + "/comm") == "sleep\n";
  return n;
}

// The worker's cgroup v2 directory when ddp-guard made one for it, else "".
fs::path guard_cgroup_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::/", 0) != 0) continue;
    for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
      const fs::path dir = fs::path(root) / line.substr(4);
      if (dir.filename().string().rfind("ddp-guard.", 0) == 0 && fs::exists(dir)) return dir;
    }
  }
  return {};
}

// What the test leaves behind when it fails: killed and removed at the end.
struct LeftoverCgroups {
  std::vector<fs::path> dirs;
  ~LeftoverCgroups() {
    for (const auto& d : dirs) {
      std::ofstream(d / "cgroup.kill") << "1\n";
      wait_until([&] { return ::rmdir(d.c_str()) == 0 || errno == ENOENT; }, std::chrono::seconds(2));
    }
  }
};

// Two workers under ddprun; then ddprun and both guards SIGKILLed with no
// chance to react. Fills `cgroups` with the
// guards' cgroups, still holding the processes the workers started; leaves it
// empty when the guards could make none (no writable cgroup v2 hierarchy).
void leave_stale_cgroups(const TempDir& dir, const ProcessTag& tag, LeftoverCgroups& cgroups) {
  const std::string script = (dir / "worker.sh").string();
  write_file(script, kWorker);
  ::chmod(script.c_str(), 0755);
  Process agent(ddprun_argv({"--nproc_per_node=2", "--no_python", "/bin/sh", script}), dir.path(),
                clean_env({tag.env(), {"MARKS", dir.path().string()}}));
  REQUIRE(wait_until([&] { return fs::exists(dir / "ready_0") && fs::exists(dir / "ready_1"); }));
  // The two workers and the four processes they left, each one up to its sleep.
  REQUIRE(wait_until([&] { return sleeping(tag) == 6; }));
  std::vector<pid_t> guards;
  for (const char* mark : {"pid_0", "pid_1"}) {
    const pid_t worker = std::stoi(read_file(dir / mark));
    guards.push_back(stat_of(worker).second);
    if (auto cg = guard_cgroup_of(worker); !cg.empty()) cgroups.dirs.push_back(cg);
  }
  if (cgroups.dirs.size() != guards.size()) {
    cgroups.dirs.clear();
    return;
  }
  // Stopped, the agent cannot clean up after the guards it sees die; SIGKILLed
  // first, the guards cannot act on their parent-death signal. (Stopping the
  // guards instead would not do: when the agent dies, the kernel sends a
  // stopped guard's orphaned process group SIGCONT.)
  agent.signal(SIGSTOP);
  REQUIRE(wait_until([&] { return stat_of(agent.pid()).first == 'T'; }));
  for (pid_t g : guards) ::kill(g, SIGKILL);
  REQUIRE(wait_until([&] {
    for (pid_t g : guards)
      if (stat_of(g).first != 'Z') return false;
    return true;
  }));
  agent.signal(SIGKILL);
  REQUIRE(agent.wait(std::chrono::seconds(5)));
  REQUIRE(wait_until([&] {
    for (pid_t g : guards)
      if (pid_alive(g)) return false;
    return true;
  }));
  // The bug this guards against: the workers' children outlive everyone. The
  // workers themselves go with their guards (parent-death signal), a moment
  // later on a loaded machine.
  const bool only_leftovers = wait_until([&] { return tag.alive().size() == 4; });
  INFO("alive:\n" << tag.describe());
  REQUIRE(only_leftovers);
  for (const auto& cg : cgroups.dirs) REQUIRE(fs::exists(cg));
}

// leave_stale_cgroups, false after a warning where ddp-guard made no cgroup
// (no writable cgroup v2 hierarchy here: the case is skipped).
bool left_stale_cgroups(const TempDir& dir, const ProcessTag& tag, LeftoverCgroups& leftovers) {
  leave_stale_cgroups(dir, tag, leftovers);
  if (!leftovers.dirs.empty()) return true;
  WARN("no writable cgroup v2 hierarchy here (ddp-guard made no cgroup): skipped");
  return false;
}

// What the program `r` that found the leftovers must have done: exited 0,
// killed the workers' children left in them, removed each, saying so once.
void check_cleaned_up(const RunResult& r, const ProcessTag& tag, const LeftoverCgroups& leftovers) {
  INFO(r.err);
  CHECK(r.code == 0);
  INFO("survivors:\n" << tag.describe());
  CHECK(tag.all_gone(std::chrono::seconds(2)));
  for (const auto& cg : leftovers.dirs) {
    INFO("cgroup " << cg);
    CHECK(!fs::exists(cg));
    CHECK(count_lines(r.err, "removed stale cgroup " + cg.string() + ":") == 1);
  }
}

// A job already running when the cgroups go stale: its worker fails once,
// when the test says so, and the restart runs /bin/true.
constexpr const char* kFailOnce = R"(#!/bin/sh
[ "$TORCHELASTIC_RESTART_COUNT" != 0 ] && exit 0
touch "$JOB/started"
while [ ! -f "$JOB/go" ]; do sleep 0.02; done
exit 1
)";

}  // namespace

TEST_CASE("after kill -9 of ddprun and its guards, the next ddprun kills and removes their cgroups") {
  TempDir dir;
  ProcessTag tag;
  LeftoverCgroups leftovers;
  if (!left_stale_cgroups(dir, tag, leftovers)) return;
  const auto r = ddprun({"--nproc_per_node=1", "--no_python", "/bin/true"}, dir);
  check_cleaned_up(r, tag, leftovers);
}

TEST_CASE("after kill -9 of ddprun and its guards, a ddp-guard started next to their cgroups removes them") {
  TempDir dir;
  ProcessTag tag;
  LeftoverCgroups leftovers;
  if (!left_stale_cgroups(dir, tag, leftovers)) return;
  // The stale cgroups are in this process's cgroup (ddprun's was the same), as
  // a new guard's own will be.
  const auto r = run({bin("ddp-guard").string(), "--", "/bin/true"}, dir.path());
  check_cleaned_up(r, tag, leftovers);
}

TEST_CASE("a stale cgroup left empty is removed without a word, by ddprun and by a ddp-guard") {
  // What a node sees most often: another job's guard that has just exited,
  // its cgroup not yet removed. Here: the guards' cgroups of a killed ddprun,
  // emptied before the next start.
  for (const char* who : {"ddprun", "ddp-guard"}) {
    DYNAMIC_SECTION(who) {
      TempDir dir;
      ProcessTag tag;
      LeftoverCgroups leftovers;
      if (!left_stale_cgroups(dir, tag, leftovers)) return;
      for (const auto& cg : leftovers.dirs) std::ofstream(cg / "cgroup.kill") << "1\n";
      REQUIRE(tag.all_gone(std::chrono::seconds(5)));
      const auto r = std::string(who) == "ddprun"
                         ? ddprun({"--nproc_per_node=1", "--no_python", "/bin/true"}, dir)
                         : run({bin("ddp-guard").string(), "--", "/bin/true"}, dir.path());
      INFO(r.err);
      CHECK(r.code == 0);
      for (const auto& cg : leftovers.dirs) CHECK(!fs::exists(cg));
      CHECK_THAT(r.err, !Catch::Contains("removed stale cgroup"));
    }
  }
}

TEST_CASE("after kill -9 of ddprun and its guards, a running ddprun's restart removes their cgroups") {
  // The restart's guard looks beside its cgroup before making it: exec'd,
  // itself; forked by the guard server, the server for it.
  for (const char* server : {"1", "0"}) {
    DYNAMIC_SECTION("DDP_GUARD_SERVER=" << server) {
      TempDir job_dir;
      TempDir dir;
      ProcessTag tag;
      LeftoverCgroups leftovers;
      const std::string script = (job_dir / "fail_once.sh").string();
      write_file(script, kFailOnce);
      Process job(ddprun_argv({"--nproc_per_node=1", "--max_restarts=1", "--no_python", "/bin/sh", script}),
                  job_dir.path(),
                  clean_env({{"JOB", job_dir.path().string()}, {"DDP_GUARD_SERVER", server}}));
      REQUIRE(wait_until([&] { return fs::exists(job_dir / "started"); }));
      const bool stale = left_stale_cgroups(dir, tag, leftovers);
      write_file(job_dir / "go", "");
      const auto code = job.wait(std::chrono::seconds(60));
      REQUIRE(code.has_value());
      if (!stale) return;
      check_cleaned_up(RunResult{*code, job.out(), job.err()}, tag, leftovers);
    }
  }
}
