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
#include <cstdint>
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
  // Native: its main thread only (eu-stack -1, gdb's thread 1), in a third
  // of the time: a hung rank that is killed once it is in.
  bool main_thread_only = false;
};

struct RankStack {
  StackTarget target;
  std::string text;                     // the whole dump
  std::vector<std::string> top_frames;  // innermost first, "file:line in fn"
  std::string note;                     // why there are no frames
  // Python: the torch.distributed call its main thread is in ("all_reduce"),
  // empty when none; and where its collectives stand by torch's Flight
  // Recorder (the line sitecustomize.py appends), when it has one.
  std::string torch_call;
  bool flight_recorder = false;
  std::uint64_t issued = 0;
  std::uint64_t completed = 0;
  bool complete = false;  // the dump's end line came (else it stopped growing, or never came)
};

// What a Python dump says (exposed for the unit tests): the main thread's
// frames, its torch.distributed call and the Flight Recorder line.
void parse_python_dump(RankStack& s);

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
