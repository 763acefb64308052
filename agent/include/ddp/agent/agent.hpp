// The per-node elastic agent: rendezvous -> spawn workers -> monitor ->
// stop / restart / succeed. Event-driven: one io thread reacts to worker
// exits, worker output, rendezvous events and signals; blocking rendezvous
// calls run on a helper thread; workers are forked by a spawner thread.
//
// Thread-safety: run() once, from one thread. Signals: run() installs
// handlers for SIGINT, SIGTERM, SIGHUP and SIGQUIT for its duration.
#pragma once

#include <memory>
#include <string>

#include "ddp/agent/agent_config.hpp"
#include "ddp/rdzv/rendezvous.hpp"

namespace ddp::agent {

struct AgentResult {
  // 0 all workers of every node succeeded; 1 workers failed (restarts spent);
  // 2 config error; 3 rendezvous failure; 128+N stopped by signal N.
  int exit_code = 0;
  // A rendezvous call was still blocked when the agent had to stop (a signal
  // during a join): the caller must exit the process without running static
  // destructors (std::_Exit), since that call cannot be interrupted.
  bool abandon_process = false;
  // For exit codes 2 and 3: the one-line reason, for the caller to print.
  std::string error;
  // For exit code 1: the failed worker that ended the job, "rank R on HOST:
  // HOW (WHY)", this node's or as the failing node reported it; empty when
  // unknown (a node that left without a report).
  std::string failure;
};

class Agent {
 public:
  // `handler` may be null: then run() creates it with rdzv::create_handler.
  explicit Agent(AgentConfig config, std::unique_ptr<rdzv::RendezvousHandler> handler = nullptr);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Throws ConfigError for a config the handler rejects; every other outcome is
  // an exit code in the result.
  AgentResult run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::agent
