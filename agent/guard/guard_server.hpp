// ddp-guard --serve-fd=N: one per agent, started once, forks every guard the
// agent asks for instead of the agent exec'ing ddp-guard per worker. A fork
// of this small single-threaded process skips the exec and the static
// start-up a guard costs otherwise (docs/data/performance-history.md, "Launch floor").
// Each guard forked here runs run_guard() exactly as an exec'd one does: the
// containment is the same (docs/agent-workers.md, "Process containment").
//
// Protocol, on the control socket (a stream socketpair, the agent's end held by
// its spawner thread): per guard, one frame (guard_request.hpp) with five fds
// attached: the worker's stdin, stdout, stderr, the guard's info pipe (read by
// the agent as for an exec'd guard, guard_protocol.hpp) and a connection of
// its own. On that connection the server answers one line, {"guard_pid": N}
// or {"error": "..."}, and later {"exit": W}, the guard's wait status. The
// guard stays a zombie, its pid reserved, until the agent closes the
// connection: the agent never signals a pid that may have been reused.
//
// Lifetime: the agent's spawner thread is its parent and its parent-death
// signal is SIGKILL; its guards' parent-death signal is their "kill the tree
// now" signal. EOF on the control socket ends it the same way.
//
// Single-threaded: SIGCHLD is taken through a signalfd.
#pragma once

#include <sys/types.h>

namespace ddp::guard {

[[noreturn]] void run_guard_server(int control_fd, pid_t agent_pid);

}  // namespace ddp::guard
