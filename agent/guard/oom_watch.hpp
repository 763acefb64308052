// Was the worker killed by the kernel's OOM killer? The guard asks the
// worker's memory cgroup, which counts every OOM kill of its processes:
// `oom_kill` in memory.events (cgroup v2, the guard's own cgroup when the
// memory controller reaches it, else the nearest ancestor that has it) and in
// memory.oom_control (v1, the worker's memory cgroup on a hybrid host). Either
// may be missing; neither is needed for anything else. A worker that died of
// SIGKILL while a count rose since it started was the OOM killer's.
//
// Thread-safety: one owner (the guard's single thread).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::guard {

class OomWatch {
 public:
  // Reads each memory cgroup's count now; `v2_cgroup` is the guard's own
  // cgroup in the unified hierarchy (its own_cgroup_dir() where it made none),
  // `proc_cgroup` the text of /proc/self/cgroup (v1 lines), `v1_root` the v1
  // memory controller's mount point.
  void start(const std::string& v2_cgroup, const std::string& proc_cgroup,
             const std::string& v1_root = "/sys/fs/cgroup/memory");
  // The text of /proc/self/cgroup ("" when unreadable).
  static std::string proc_self_cgroup();
  // The cgroup whose count rose since start(), if any.
  std::optional<std::string> killed() const;
  // The highest memory use that cgroup saw (memory.peak, memory.max_usage_in_bytes); -1 unknown.
  static std::int64_t peak_bytes(const std::string& cgroup);

 private:
  struct Counted {
    std::string dir;
    std::string file;  // memory.events or memory.oom_control
    std::uint64_t at_start = 0;
  };
  std::vector<Counted> counted_;
};

// The `oom_kill N` line of a memory.events or memory.oom_control text.
std::optional<std::uint64_t> oom_kill_count(std::string_view text);
// "7.8 GiB", "64.0 MiB", "512 KiB".
std::string memory_text(std::int64_t bytes);

// The line the guard writes to the worker's stderr (after kGuardLinePrefix),
// and its reading by the agent. `peak_bytes` < 0: unknown.
std::string oom_line(long worker_pid, std::int64_t peak_bytes, const std::string& cgroup);
struct OomReport {
  std::int64_t peak_bytes = -1;
  std::string peak;  // "memory peak 7.8 GiB", or "" when unknown
};
// `line` is a whole stderr line, prefix included; nullopt unless it is oom_line's.
std::optional<OomReport> parse_oom_line(std::string_view line);

}  // namespace ddp::guard
