// --preload: the per-node zygote that imports the modules once and forks
// every Python-script worker (and every replacement) from then on
// (docs/agent.md, "Preloading"). This class starts it (through the process
// runner, under its own ddp-guard like any worker), learns whether it is
// ready or refused, replaces it when it dies, and hands the spawner thread a
// connection to it.
//
// Thread-safety: start() and stop() on the io thread (the runner's callbacks
// too); connect() on the runner's spawner thread. The state is shared under a
// mutex.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "process_runner.hpp"

namespace spdlog {
class logger;
}

namespace ddp::agent {

// ddp_zygote.py in share/ddprun beside the running executable's bin/, else
// in the install prefix; empty when neither exists.
const std::string& zygote_script();

class PreloadZygote {
 public:
  // `python`: the workers' interpreter; `env`: the zygote's whole environment
  // (what every worker of this node has in common).
  PreloadZygote(ProcessRunner& runner, std::string python, std::vector<std::string> modules,
                std::filesystem::path socket_path, std::vector<std::string> env,
                std::shared_ptr<spdlog::logger> log);
  ~PreloadZygote();
  PreloadZygote(const PreloadZygote&) = delete;
  PreloadZygote& operator=(const PreloadZygote&) = delete;

  // Starts the zygote (its imports run while the agent rendezvouses).
  void start();
  // Kills it; no replacement follows.
  void stop();
  // Spawner thread: a connected socket to a ready zygote (waiting while one
  // is starting), or -1 when workers must be spawned normally.
  int connect();

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared: the runner's callbacks hold weak references
};

}  // namespace ddp::agent
