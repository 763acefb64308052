// ddp-guard's reading of the OOM killer's counts (oom_watch.hpp), over
// directories laid out like cgroup files, and the line it writes for the
// agent.
#include "oom_watch.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "test_support.hpp"

using namespace ddp::guard;
namespace fs = std::filesystem;

namespace {

void put(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

}  // namespace

TEST_CASE("the oom_kill count is read from memory.events and memory.oom_control") {
  CHECK(oom_kill_count("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 0\n") == 2u);
  CHECK(oom_kill_count("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n") == 7u);
  CHECK_FALSE(oom_kill_count("oom_kill_disable 0\nunder_oom 0\n"));
  CHECK_FALSE(oom_kill_count("oom_kill -1\n"));
  CHECK_FALSE(oom_kill_count(""));
}

TEST_CASE("a count that rose in the v1 memory cgroup or a v2 ancestor names the cgroup") {
  ddp::test::TempDir dir;
  const fs::path v1 = dir / "v1";
  const fs::path v2 = dir / "v2";
  // v2: the guard's cgroup has no memory controller; its parent does.
  put(v2 / "cgroup.procs", "");
  put(v2 / "job" / "cgroup.procs", "");
  put(v2 / "job" / "memory.events", "oom 0\noom_kill 0\n");
  put(v2 / "job" / "memory.peak", "8375000000\n");
  put(v2 / "job" / "ddp-guard.1" / "cgroup.procs", "");
  // v1: the worker's memory cgroup from /proc/self/cgroup.
  put(v1 / "slurm" / "job_7" / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n");
  put(v1 / "slurm" / "job_7" / "memory.max_usage_in_bytes", "67108864\n");
  const std::string proc = "9:name=systemd:/\n4:memory:/slurm/job_7\n0::/job/ddp-guard.1\n";

  OomWatch watch;
  watch.start((v2 / "job" / "ddp-guard.1").string(), proc, v1.string());
  CHECK_FALSE(watch.killed());
  put(v1 / "slurm" / "job_7" / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n");
  REQUIRE(watch.killed() == (v1 / "slurm" / "job_7").string());
  CHECK(OomWatch::peak_bytes(*watch.killed()) == 67108864);

  OomWatch v2_only;
  v2_only.start((v2 / "job" / "ddp-guard.1").string(), "0::/job/ddp-guard.1\n", v1.string());
  put(v2 / "job" / "memory.events", "oom 1\noom_kill 1\n");
  REQUIRE(v2_only.killed() == (v2 / "job").string());
  CHECK(OomWatch::peak_bytes(*v2_only.killed()) == 8375000000);
  // Neither hierarchy there: nothing to read, nothing named.
  OomWatch none;
  none.start("", "", (dir / "missing").string());
  CHECK_FALSE(none.killed());
}

TEST_CASE("the guard's OOM line reads back with its peak, and nothing else reads as one") {
  const std::string line = "ddprun: " + oom_line(4242, 8375000000, "/sys/fs/cgroup/memory/job");
  CHECK(line ==
        "ddprun: worker pid=4242: killed by the kernel OOM killer (memory peak 7.8 GiB, 8375000000 bytes, "
        "memory "
        "cgroup /sys/fs/cgroup/memory/job)");
  const auto r = parse_oom_line(line);
  REQUIRE(r);
  CHECK(r->peak == "memory peak 7.8 GiB");
  CHECK(r->peak_bytes == 8375000000);
  const auto unknown = parse_oom_line("ddprun: " + oom_line(1, -1, "/x"));
  REQUIRE(unknown);
  CHECK(unknown->peak.empty());
  CHECK(unknown->peak_bytes == -1);
  CHECK_FALSE(
      parse_oom_line("worker pid=1: killed by the kernel OOM killer (memory peak 1 KiB, 1024 bytes)"));
  CHECK_FALSE(parse_oom_line("ddprun: worker pid=1 exited; stopping 2 process(es) it left running"));
  CHECK(memory_text(64LL << 20) == "64.0 MiB");
  CHECK(memory_text(512 * 1024) == "512 KiB");
}
