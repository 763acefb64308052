// The exit codes every ddp executable uses (docs/errors.md), and the one
// mapping from an exception class to its code, for each main()'s top-level
// catch, so that no main() spells a code as a literal or maps errors its own way.
#pragma once

#include <exception>

#include "ddp/common/error.hpp"

namespace ddp {

enum class ExitCode : int {
  kOk = 0,
  kFailed = 1,      // workers failed, a key not found, an unexpected error
  kConfig = 2,      // usage or configuration: one line names the flag, variable or file
  kRendezvous = 3,  // rendezvous failed or timed out, or the store was lost
  kNoProgress = 4,  // ddprun: attempts failed one after another without progress (--max_no_progress_restarts)
  kUnhealthy = 5,   // ddprun: the node failed its health checks and gave up (--health_retries)
  kExcluded = 6,    // ddprun: this node excluded, or the job below MIN by exclusions (--max_node_failures)
};

constexpr int exit_code(ExitCode c) { return static_cast<int>(c); }

// Stopped by signal `sig`: the shell's convention, 128 + N.
constexpr int signal_exit_code(int sig) { return 128 + sig; }

// A child whose program could not be executed: the shell's convention, 127.
constexpr int exec_failed_exit_code() { return 127; }

// ConfigError -> 2, ExcludedError -> 6, RendezvousError -> 3, anything else -> 1.
inline int exit_code_of(const std::exception& e) noexcept {
  if (dynamic_cast<const ConfigError*>(&e) != nullptr) return exit_code(ExitCode::kConfig);
  if (dynamic_cast<const ExcludedError*>(&e) != nullptr) return exit_code(ExitCode::kExcluded);
  if (dynamic_cast<const RendezvousError*>(&e) != nullptr) return exit_code(ExitCode::kRendezvous);
  return exit_code(ExitCode::kFailed);
}

}  // namespace ddp
