// Fault injection for the persistence layer's system calls and the event
// loops' handlers, for the recovery tests (like etcd's gofail failpoints).
// Nothing is armed unless arm() runs, and
// only the test build of the daemon (ddp-rendezvousd-failpoints, compiled with
// DDP_FAILPOINTS) calls it, from $DDP_FAILPOINTS; the shipped daemon never does.
//
// Spec: "point=action[@skip][*times]" joined by ';'. The point passes `skip`
// calls, then fires on the next `times` calls (default: every call after).
// Points: log.write, log.fsync, log.truncate, log.create.{write,fsync,rename},
// snapshot.write, snapshot.fsync, snapshot.rename, and in handlers of the
// loops: server.accept, server.read, proxy.accept, proxy.read, metrics.accept.
// Actions: enospc, eio (the call fails with that errno and writes nothing),
// short (a write writes half, then fails with ENOSPC), crash (a write writes
// half, any other call does nothing; then the process _exit(99)s), throw (the
// handler throws std::runtime_error, as a bug in it would).
//
// Thread-safety: arm() before threads start; check() from any one thread.
#pragma once

#include <string>
#include <string_view>

namespace ddp::store::server::failpoints {

enum class Action { kNone, kError, kShort, kCrash, kThrow };

struct Fault {
  Action action = Action::kNone;
  int err = 0;  // kError, kShort: the errno to fail with
  explicit operator bool() const { return action != Action::kNone; }
};

// The fault to inject at `point` now; a none-fault when nothing is armed there.
Fault check(std::string_view point);
// Arms the points of `spec`; ConfigError naming the bad entry.
void arm(const std::string& spec);
// The exit status of a "crash" action.
constexpr int kCrashExitCode = 99;
[[noreturn]] void crash(std::string_view point);
// Throws when `point` is armed with "throw" (other actions mean nothing there).
void maybe_throw(std::string_view point);

}  // namespace ddp::store::server::failpoints
