// Guard cgroups whose ddp-guard is gone. A guard removes its cgroup as it
// exits, and the agent removes the cgroup of a guard it saw killed; when the
// agent and every guard are SIGKILLed at once, nobody does, and whatever the
// workers started (re-parented to init) lives on in those cgroups. The next
// ddprun on the node walks the unified hierarchy for them, and each ddp-guard
// looks among the cgroups beside the one it makes.
//
// A guard's cgroup is named after its owner, "ddp-guard.<pid>.<start>.<pidns>":
// the guard's pid, its start time (clock ticks after boot, /proc/PID/stat
// field 22) and the inode of its pid namespace. The pid alone may name another
// process once it is reused; the start time tells them apart. The namespace
// keeps a scan from judging a guard of another container by a pid that means
// something else here: such cgroups, and every name not of this form, are
// never touched.
//
// Thread-safety: free functions, no shared state.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::guard {

inline constexpr std::string_view kGuardCgroupPrefix = "ddp-guard.";

struct GuardOwner {
  pid_t pid = 0;
  unsigned long long start_time = 0;
  unsigned long long pid_ns = 0;
};

// "<pid>.<start>.<pidns>" for process `pid`; "" when /proc cannot tell.
std::string owner_name(pid_t pid);
// The owner a cgroup directory's name records; nullopt for any other name.
std::optional<GuardOwner> parse_guard_cgroup(std::string_view dir_name);
// False only when the owner is known to be gone: no process with its pid, a
// zombie (with its agent alive, the agent kills the cgroup too; both ways end
// the same), or one that started at another time (the pid was reused). An
// owner in another pid namespace counts as alive: it cannot be judged here.
bool owner_alive(const GuardOwner& owner);

struct StaleCgroup {
  std::string path;
  pid_t owner = 0;
  std::size_t killed = 0;  // processes found in it (and in cgroups nested in it)
};

// Kills and removes the guard cgroups whose owner is gone, among the cgroups in
// `dir` and, up to `depth` levels, in those nested in them. Returns the ones
// this call removed.
std::vector<StaleCgroup> reap_stale_guard_cgroups(const std::string& dir, int depth);
// The one line said per removed cgroup.
std::string describe(const StaleCgroup& c);
// Whether a removed cgroup is worth that line at the default level: only when
// it held processes. An empty one is most often a guard that has just exited
// normally, its cgroup not yet removed by it or its agent (a job beside this
// one on the node), and its removal tells the user nothing.
inline bool worth_telling(const StaleCgroup& c) { return c.killed > 0; }

}  // namespace ddp::guard
