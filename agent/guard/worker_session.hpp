// Where a worker's guard (and so the worker) runs: in a session of its own by
// default, as torchrun's workers do, so that the kernel's autogroup scheduler
// gives each worker a share of the CPU instead of one share for all of them
// (docs/agent-workers.md, "Sessions"). At a terminal the worker's
// pseudo-terminal is that session's controlling terminal. Used between fork
// and exec by fork_exec, by the guard server and (in Python) by the preload
// zygote: async-signal-safe, header only, shared by agent and guard.
#pragma once

#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>

namespace ddp::guard {

// A process group of its own in the agent's session.
inline constexpr int kSessionShared = -2;
// A session of its own, without a controlling terminal.
inline constexpr int kSessionOwn = -1;
// 0, 1 or 2: a session of its own whose controlling terminal is that stdio fd,
// a pseudo-terminal the agent opened for the worker.

// Makes the calling process the leader of its group (kSessionShared) or of a
// new session and its group, then takes `session`'s fd as the controlling
// terminal. Returns 0, or the errno of the setpgid or setsid that failed. A
// pseudo-terminal that cannot be the controlling terminal leaves the session
// without one, as a worker had before: its output and input work all the same.
inline int enter_session(int session) {
  if (session == kSessionShared) return ::setpgid(0, 0) == 0 ? 0 : errno;
  if (::setsid() < 0) return errno;
  if (session >= 0 && session <= 2) ::ioctl(session, TIOCSCTTY, 0);
  return 0;
}

}  // namespace ddp::guard
