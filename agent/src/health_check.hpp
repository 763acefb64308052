// The checks a node runs before each rendezvous (docs/agent-recovery.md, "Health
// checks"): --log_dir and --health_paths usable, the GPUs there, the store
// answering in time, and the user's --health_check command. The first check
// that fails is the verdict; an unhealthy node does not join.
//
// Built-in checks cost a few system calls and one store round trip, so a
// node without GPUs and without a command joins within a fraction of a
// millisecond of what it did before.
//
// Thread-safety: run() on one thread at a time (the rendezvous thread);
// cancel() from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "ddp/agent/agent_config.hpp"
#include "nvml_probe.hpp"

namespace ddp::store {
class Store;
}

namespace ddp::agent {

struct HealthVerdict {
  std::string check;   // "" when healthy; else gpus, path, store, command
  std::string reason;  // one line: what was found and the flag that set the bound
  std::string note;    // healthy or not: a line to log (no NVML here, once; no store answer)
  bool healthy() const { return check.empty(); }
};

class HealthCheck {
 public:
  explicit HealthCheck(const AgentConfig& cfg);
  ~HealthCheck();
  HealthCheck(const HealthCheck&) = delete;
  HealthCheck& operator=(const HealthCheck&) = delete;

  // Runs the checks in order, cheapest first; `store` may be null (no store
  // check). Blocks for as long as the command runs, at most its timeout.
  HealthVerdict run(store::Store* store);
  // Kills a command still running (its whole process group); run() then
  // returns at once. Later runs do not start a command.
  void cancel();

 private:
  HealthVerdict check_paths();
  HealthVerdict check_gpus();
  HealthVerdict check_store(store::Store& store);
  HealthVerdict run_command();

  const AgentConfig& cfg_;
  NvmlProbe nvml_;
  bool nvml_noted_ = false;
  // --health_gpus=auto: the GPUs NVML saw at the first check, the bound for
  // every later one (a GPU lost between restarts keeps the node out).
  std::optional<int> gpus_at_start_;
  std::atomic<pid_t> running_{0};     // the command's process group while it runs
  std::atomic<bool> guarded_{false};  // running_ is the command's ddp-guard
  std::atomic<bool> cancelled_{false};
};

// Checks that `dir` is a readable, writable directory with at least
// `min_free_mb` MiB free; "" when it is, else why (naming `flag`).
std::string check_dir(const std::filesystem::path& dir, std::uint64_t min_free_mb, const std::string& flag);

}  // namespace ddp::agent
