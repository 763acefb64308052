// The process tree under one pid, read from /proc. Used by ddp-guard, which is
// a child subreaper: every descendant of its worker stays in its subtree (an
// orphan is re-parented to the guard, not to init), so "the subtree of the
// guard" is exactly "everything the worker started", whatever it did
// (setsid, double fork, its own process group).
//
// Thread-safety: free functions, no shared state.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ddp::guard {

struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgid = 0;
  char state = '?';  // R, S, D, Z, T, ... as in /proc/PID/stat
  std::string comm;  // control and non-ASCII bytes as '?'
  // Clock ticks after boot when the process started: with the pid, it names
  // one process even after the pid is reused.
  unsigned long long start_time = 0;
};

// /proc/PID/stat of one process; false when it is gone.
bool read_proc(pid_t pid, ProcInfo* out);

// Every live descendant of `root` (not `root` itself), parents before children.
// Zombies are left out: they hold no resources and their parent (or the guard,
// once the parent is gone) reaps them.
std::vector<ProcInfo> descendants(pid_t root);

// "D (disk sleep)", "R (running)", ... for a report line.
std::string state_text(char state);

}  // namespace ddp::guard
