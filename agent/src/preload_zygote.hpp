// --preload: the per-node zygote that imports the modules once and forks
// every Python-script worker (and every replacement) from then on
// (docs/agent-preload.md, "Preloading"). This class starts it (under its own
// ddp-guard like any worker, from a process runner of its own: the workers'
// runner's spawner thread waits in connect() for the zygote to be ready, so
// the zygote cannot be spawned from there), learns whether it is ready or
// refused, replaces it when it dies, and hands the workers' spawner thread a
// connection to it.
//
// Thread-safety: construct, start(), stop() and destroy on the io thread (the
// runner's callbacks run there too); connect() on another thread. The state
// is shared under a mutex.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
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
  PreloadZygote(boost::asio::io_context& io, std::string python, std::vector<std::string> modules,
                std::filesystem::path socket_path, std::vector<std::string> env,
                std::shared_ptr<spdlog::logger> log);
  ~PreloadZygote();
  PreloadZygote(const PreloadZygote&) = delete;
  PreloadZygote& operator=(const PreloadZygote&) = delete;

  // Starts the zygote (its imports run while the agent rendezvouses).
  void start();
  // Kills it (and so the workers forked from it); no replacement follows.
  void stop();
  // No worker is forked from now on (a spawn waiting for a starting zygote
  // stops waiting), and the zygote and its workers are left running.
  void stop_forking();
  // A connected socket to a ready zygote, or -1 when workers must be spawned
  // normally. Waits while one is starting, and for the replacement of one
  // found dead.
  int connect();
  // connect() as a function that stays valid after this object is gone (it
  // then returns -1): what a spawn queued on another thread holds.
  std::function<int()> connector() const;

 private:
  struct State;
  std::unique_ptr<ProcessRunner> runner_;  // the zygote's own
  std::shared_ptr<State> state_;           // shared: the runner's callbacks hold weak references
};

}  // namespace ddp::agent
