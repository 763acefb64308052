// What the agent and ddp-guard agree on. ddp-guard sits between the agent and
// one worker: the agent spawns `ddp-guard [options] -- WORKER ARGS...`, the
// guard forks and execs the worker and watches its whole process tree
// (docs/agent-workers.md, "Process containment").
#pragma once

#include <signal.h>

#include <string_view>

namespace ddp::guard {

// Sent by the agent to the guard alone (never to the group) instead of SIGKILL,
// and set as the guard's parent-death signal: "SIGKILL the whole tree now, wait
// a bounded time, exit". A real SIGKILL would kill the guard first and orphan
// whatever left the worker's process group. A real-time signal, so that no
// notice a user forwards to workers (--signals_to_handle SIGUSR1,SIGUSR2) is
// mistaken for it; SIGRTMIN is a run-time value in glibc, the same in the agent
// and the guard.
inline int kill_now_signal() { return SIGRTMIN + 3; }

// Options on the guard's command line, before "--".
inline constexpr const char* kStopTimeoutFlag = "--stop-timeout-ms=";  // grace after SIGTERM
inline constexpr const char* kInfoFdFlag = "--info-fd=";               // where the guard reports
inline constexpr const char* kAgentPidFlag = "--agent-pid=";           // died before the guard started?
// The worker is already the guard's child (forked by the preload zygote, which
// then exec'd the guard in the worker's parent): watch it instead of starting
// one. No "--" and no command then (docs/agent-preload.md, "Preloading").
inline constexpr const char* kAdoptPidFlag = "--adopt-pid=";
// The fence backstop (docs/rendezvous.md, "Fencing"): a file of 8 bytes, one
// native-endian int64 the agent keeps storing to, the CLOCK_MONOTONIC
// nanosecond by which the guard kills the worker's tree unless the value has
// moved on since; 0 means no deadline. The preload zygote passes on the path
// it finds in its environment, kFenceFileEnv.
inline constexpr const char* kFenceFileFlag = "--fence-file=";
inline constexpr const char* kFenceFileEnv = "DDP_FENCE_FILE";
// Run as the agent's guard server instead (guard_server.hpp): fork a guard
// for each request on this fd. With --agent-pid and nothing else.
inline constexpr const char* kServeFdFlag = "--serve-fd=";

// On the info fd the guard writes one of these, then closes it:
//   "pid <worker pid>\n" [+ "cgroup <path>\n"]   the worker was exec'd
//   "error <errno>\n"                            exec of the worker failed (guard exits 127)
inline constexpr const char* kInfoPid = "pid";
inline constexpr const char* kInfoCgroup = "cgroup";
inline constexpr const char* kInfoError = "error";

// Every line the guard itself writes to the worker's stderr starts with this
// (the agent tells such a line apart from the worker's own output).
inline constexpr std::string_view kGuardLinePrefix = "ddprun: ";

}  // namespace ddp::guard
