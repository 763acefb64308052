// "Where was it stuck?": the stacks of the local workers, collected before a
// hung worker is killed and on demand (SIGURG to ddprun).
//  - Python workers: ddprun puts a directory of its own first on PYTHONPATH
//    whose sitecustomize.py registers faulthandler on SIGURG, writing every
//    thread's stack to DDPRUN_STACK_FILE, then runs any other sitecustomize.
//  - native workers: eu-stack, else gdb -batch, when installed.
// Collection runs on a helper thread within a budget and posts the result
// back to the io thread: it never blocks the agent.
//
// Thread-safety: StackCollector's methods on the io thread only.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ddp/agent/worker_env.hpp"

namespace ddp::agent {

// The signal a Python worker dumps its stacks on, and ddprun collects them on.
inline constexpr int kStackDumpSignal = SIGURG;  // ignored by default

// The directory holding ddprun's sitecustomize.py (beside the executable in
// ../share/ddprun/python, else the install prefix); empty when missing.
const std::string& python_hooks_dir();
// argv[0] of the worker runs a Python interpreter.
bool is_python_command(const std::string& argv0);
// Puts the hooks directory first on PYTHONPATH and names the dump file;
// false (env unchanged) when the hooks directory is missing.
bool add_python_stack_hook(EnvMap& env, const std::string& stack_file);

struct StackTarget {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  std::string python_file;  // the worker's faulthandler file; empty: native
};

struct RankStack {
  StackTarget target;
  std::string text;                     // the whole dump
  std::vector<std::string> top_frames;  // innermost first, "file:line in fn"
  std::string note;                     // why there are no frames
};

// Every rank's dump, for the stacks file.
std::string render_stacks(const std::vector<RankStack>& stacks);

class StackCollector {
 public:
  using Done = std::function<void(std::vector<RankStack>)>;

  explicit StackCollector(boost::asio::io_context& io);
  ~StackCollector();  // waits for a collection under way (bounded by its budget)
  StackCollector(const StackCollector&) = delete;
  StackCollector& operator=(const StackCollector&) = delete;

  bool busy() const { return busy_; }
  // Collects on a helper thread; `done` runs on the io thread. Requires !busy().
  void collect(std::vector<StackTarget> targets, std::chrono::milliseconds budget, Done done);

 private:
  boost::asio::io_context& io_;
  std::thread thread_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  bool busy_ = false;
};

}  // namespace ddp::agent
