// The agent's side of the guard server (agent/guard/guard_server.hpp): starts
// `ddp-guard --serve-fd` once, as a child of the spawner thread, and asks it
// for one guard per worker. A guard forked there runs as one exec'd would:
// it reports on the info pipe the agent gave it, leads the worker's process
// group, and its exit comes as a line on its own connection.
//
// DDP_GUARD_SERVER=0 (or false, no, off) in the agent's environment turns the
// server off: each guard is exec'd (docs/agent-workers.md, "The guard server").
//
// Thread-safety: one owner thread, the process runner's spawner thread (the
// server's parent-death signal follows it).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

#include "guard_request.hpp"

namespace ddp::agent {

// False when DDP_GUARD_SERVER is 0, false, no or off.
bool guard_server_enabled();

class GuardServer {
 public:
  explicit GuardServer(std::string guard_executable);
  ~GuardServer();  // closes the control socket (the server ends, and its guards) and reaps it
  GuardServer(const GuardServer&) = delete;
  GuardServer& operator=(const GuardServer&) = delete;

  // Starts the server unless it runs. False (with a warning logged once) when it
  // cannot be started: guards are then exec'd.
  bool start();

  struct Started {
    pid_t guard_pid = -1;  // leads the worker's process group
    int conn = -1;         // the guard's exit line comes here; the caller closes it when done with the pid
    std::string error;     // set when no guard was started
    // With `error`: surely nothing was started, so the guard may be exec'd
    // instead. False when one may run (no answer in time).
    bool nothing_started = false;
  };
  // Asks for a guard running `request`, with the worker's stdin, stdout,
  // stderr and the guard's info pipe (all stay the caller's to close), and
  // waits at most `timeout` for its pid.
  Started start_guard(const guard::GuardRequest& request, int in, int out, int err, int info,
                      std::chrono::milliseconds timeout);

  pid_t pid() const { return pid_; }

 private:
  bool reap_if_gone();  // true when the server had exited (and is reaped now)
  void stop();

  std::string exe_;
  pid_t pid_ = -1;
  int control_ = -1;
  bool given_up_ = false;
};

}  // namespace ddp::agent
