// A worker killed by the kernel's OOM killer is named as such (docs/agent.md,
// "Failure report"): the test puts ddprun into a memory cgroup of its own
// with a 96 MiB limit (cgroup v1's memory controller on a hybrid host, or
// v2's where the unified hierarchy has it), one worker allocates 1 GiB, and
// the kernel kills it. Root only; skipped otherwise.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "launcher_test_util.hpp"

using namespace ddp::test;
using namespace ddp::test::launcher;
using namespace std::chrono_literals;

namespace {

bool write_text(const fs::path& file, const std::string& text) {
  std::ofstream out(file);
  out << text;
  out.flush();
  return static_cast<bool>(out);
}

// A memory cgroup with a limit, removed (after its processes are gone) at the end.
struct LimitedCgroup {
  explicit LimitedCgroup(std::int64_t limit) {
    if (::geteuid() != 0) {
      why = "needs root to make a memory cgroup";
      return;
    }
    const std::string name = "ddp-oom-test-" + std::to_string(::getpid());
    // v1 (hybrid host): the memory controller's own hierarchy, under our memory cgroup.
    std::ifstream proc("/proc/self/cgroup");
    for (std::string line; std::getline(proc, line);) {
      const auto a = line.find(':');
      const auto b = line.find(':', a + 1);
      if (a == std::string::npos || b == std::string::npos || line.substr(a + 1, b - a - 1) != "memory")
        continue;
      const fs::path dir = fs::path("/sys/fs/cgroup/memory") / line.substr(b + 2) / name;
      std::error_code ec;
      if (fs::create_directory(dir, ec) && write_text(dir / "memory.limit_in_bytes", std::to_string(limit))) {
        // With swap, the limit on memory and swap together (when the kernel counts swap).
        if (fs::exists(dir / "memory.memsw.limit_in_bytes"))
          write_text(dir / "memory.memsw.limit_in_bytes", std::to_string(limit));
        path = dir;
        return;
      }
    }
    // v2: a child of the root with the memory controller enabled there.
    for (const fs::path root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
      if (read_file(root / "cgroup.controllers").find("memory") == std::string::npos) continue;
      write_text(root / "cgroup.subtree_control", "+memory");
      std::error_code ec;
      const auto dir = root / name;
      if (fs::create_directory(dir, ec) && write_text(dir / "memory.max", std::to_string(limit))) {
        write_text(dir / "memory.swap.max", "0");
        path = dir;
        return;
      }
    }
    why = "no writable memory cgroup (cgroup v1 memory controller or v2 with memory)";
  }
  ~LimitedCgroup() {
    if (path.empty()) return;
    wait_until([&] { return read_file(path / "cgroup.procs").empty(); }, 10s);
    ::rmdir(path.c_str());
  }
  fs::path path;
  std::string why;
};

}  // namespace

TEST_CASE(
    "a worker the kernel's OOM killer ends is named as such in the report, event log and status record") {
  TempDir dir;
  LimitedCgroup cg(96LL << 20);
  if (cg.path.empty()) {
    WARN("SKIP: " << cg.why);
    return;
  }
  const LocalDaemon daemon(dir);
  write_file(dir / "oom.py",
             "import os, time\n"
             "if os.environ['RANK'] == '1':\n"
             "    b = b'x' * (1 << 30)\n"
             "    print('allocated', len(b))\n"
             "time.sleep(3600)\n");
  const auto log = dir / "events.jsonl";
  std::string cmd = "echo $$ > '" + (cg.path / "cgroup.procs").string() + "' && exec";
  for (const auto& a : ddprun_argv({"--nnodes=1", "--nproc_per_node=2", "--rdzv_backend=c10d",
                                    "--rdzv_endpoint=" + daemon.endpoint, "--rdzv_id=oomjob", "--event_log",
                                    log.string(), "--python", kPython, (dir / "oom.py").string()})) {
    cmd += " '" + a + "'";
  }
  const auto r = run({"/bin/sh", "-c", cmd}, dir.path(), clean_env({}), 60s);
  INFO(r.err);
  CHECK(r.code == 1);
  // The report: the exit, and the line a user greps for.
  CHECK_THAT(r.err,
             Catch::Contains("  exit       : signal SIGKILL: killed by the kernel OOM killer (memory peak "));
  CHECK_THAT(r.err, Catch::Contains("worker rank=1 local_rank=1 pid=") &&
                        Catch::Contains("was killed by the kernel OOM killer (memory peak "));
  // The event log: the worker's exit says so.
  bool event = false;
  std::ifstream events(log);
  for (std::string line; std::getline(events, line);) {
    const auto e = nlohmann::json::parse(line);
    if (e.at("event") == "worker_exit" && e.at("rank") == 1) {
      CHECK(e.value("oom_killed", false));
      CHECK(e.at("memory_peak_bytes").get<std::int64_t>() > 0);
      CHECK_THAT(e.at("reason").get<std::string>(),
                 Catch::StartsWith("killed by the kernel OOM killer (memory peak"));
      event = true;
    }
  }
  CHECK(event);
  // The status record in the store, as `ddp-store` shows it.
  const auto status =
      run({bin("ddp-store").string(), "--endpoint", daemon.endpoint, "list", "/oomjob/agent/status/"},
          dir.path());
  CHECK_THAT(status.out, Catch::Contains("\"oom_killed\":true"));
  // What the node reports to others and the launcher of a --hosts job:
  // `rank 1 on HOST: killed by the kernel OOM killer (memory peak N MiB)`.
  const auto failures =
      run({bin("ddp-store").string(), "--endpoint", daemon.endpoint, "list", "/oomjob/agent/first_failure/"},
          dir.path());
  CHECK_THAT(failures.out, Catch::Contains(": killed by the kernel OOM killer (memory peak "));
  CHECK_THAT(failures.out, Catch::Contains("\"failure\":\"rank 1 on "));
}
