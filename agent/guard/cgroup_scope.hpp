// An optional cgroup v2 for one worker's process tree, used by ddp-guard in
// addition to the subreaper where the unified hierarchy is writable (root, a
// delegated subtree). It catches what the subreaper cannot: processes left
// behind when the guard itself is SIGKILLed (the agent kills the cgroup then),
// and it kills a whole tree with one write (cgroup.kill, Linux 5.14+).
// Nothing depends on it: every step falls back to signalling pids.
//
// Thread-safety: one owner; join_self() is async-signal-safe (fork child).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

namespace ddp::guard {

class CgroupScope {
 public:
  // Creates "<own cgroup>/ddp-guard.<pid>" in the unified hierarchy, or returns
  // null when there is none or it is not writable.
  static std::unique_ptr<CgroupScope> create(pid_t guard_pid);
  ~CgroupScope();  // removes the cgroup (and empty cgroups inside it) if it is empty
  CgroupScope(const CgroupScope&) = delete;
  CgroupScope& operator=(const CgroupScope&) = delete;

  const std::string& path() const { return path_; }
  // Moves the calling process in (between fork and exec). False on failure.
  bool join_self() const;
  // Moves process `pid` in (a worker the guard adopted). False on failure.
  bool join(pid_t pid) const;
  // SIGKILLs every process in the cgroup at once. False without cgroup.kill.
  bool kill_all() const;
  bool populated() const;

 private:
  explicit CgroupScope(std::string path);
  std::string path_;
  std::string procs_file_;  // built up front: join_self() may not allocate
};

// For the agent: kills and removes a cgroup a guard left behind (it was killed).
void kill_and_remove_cgroup(const std::string& path);

}  // namespace ddp::guard
