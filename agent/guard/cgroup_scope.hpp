// An optional cgroup v2 for one worker's process tree, used by ddp-guard in
// addition to the subreaper where the unified hierarchy is writable (root, a
// delegated subtree). It catches what the subreaper cannot: processes left
// behind when the guard itself is SIGKILLed (the agent kills the cgroup then,
// or, when the agent died too, the next ddprun or ddp-guard: stale_cgroups.hpp),
// and it kills a whole tree with one write (cgroup.kill, Linux 5.14+).
// Nothing depends on it: every step falls back to signalling pids.
//
// Thread-safety: one owner; join_self() is async-signal-safe (fork child).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>

namespace ddp::guard {

class CgroupScope {
 public:
  // Creates "<parent>/ddp-guard.<owner>", <owner> naming the guard `guard_pid`
  // for good (stale_cgroups.hpp); `parent` is own_cgroup_dir(). Null when
  // there is no such hierarchy ("") or it is not writable.
  static std::unique_ptr<CgroupScope> create(pid_t guard_pid, const std::string& parent);
  ~CgroupScope();  // remove()s the cgroup, if it is empty and still there
  CgroupScope(const CgroupScope&) = delete;
  CgroupScope& operator=(const CgroupScope&) = delete;

  const std::string& path() const { return path_; }
  // fork(), but the child starts inside the cgroup (clone3 with
  // CLONE_INTO_CGROUP, Linux 5.7+). Moving a process in afterwards (join_self)
  // waits for an RCU grace period under a lock every migration in the system
  // takes: milliseconds per worker, one after the other. -1 with errno where
  // the kernel cannot (ENOSYS, EINVAL...): the caller then forks and joins.
  pid_t fork_into() const;
  // Moves the calling process in (between fork and exec). False on failure.
  bool join_self() const;
  // Moves process `pid` in (a worker the guard adopted). False on failure.
  bool join(pid_t pid) const;
  // SIGKILLs every process in the cgroup at once. False without cgroup.kill.
  bool kill_all() const;
  // Removes the cgroup (and empty cgroups inside it) now: false while a
  // process is still in it.
  bool remove();

 private:
  CgroupScope(std::string path, int dir_fd);
  std::string path_;
  int dir_fd_;              // the cgroup's directory, for fork_into()
  std::string procs_file_;  // built up front: join_self() may not allocate
  bool removed_ = false;
};

// The unified (v2) hierarchy's mount point: /sys/fs/cgroup on a pure v2
// system, /sys/fs/cgroup/unified on a hybrid one; "" when there is none.
std::string unified_root();
// The calling process's own cgroup directory in it ("" when unknown): where
// its guards' cgroups go.
std::string own_cgroup_dir();

// SIGKILLs every process in cgroup `path` and in the cgroups nested in it;
// returns how many there were.
std::size_t kill_cgroup_tree(const std::string& path);
// Removes `path` after the cgroups nested in it, waiting (at most a second)
// for the killed processes to leave. False when it could not.
bool remove_cgroup_tree(const std::string& path);

// For the agent: kills and removes a cgroup a guard left behind (it was killed).
void kill_and_remove_cgroup(const std::string& path);

}  // namespace ddp::guard
