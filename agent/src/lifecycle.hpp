// The agent's lifecycle as a small state machine: the phase it is in, why the
// workers are being stopped, the restart budget, the current round, and the
// exit codes a run can end with.
//
// Thread-safety: the io thread only, like everything the agent owns.
#pragma once

#include <signal.h>

#include <optional>
#include <string>

#include "ddp/common/exit_code.hpp"
#include "ddp/rdzv/rendezvous.hpp"

namespace ddp::agent {

enum class Phase { kRendezvous, kRunning, kStopping, kSucceeded, kClosing, kDone };

// Why the workers are being stopped; decides what happens once they are gone.
enum class StopReason {
  kLocalFailure,   // a local worker failed: spends a restart
  kRemoteFailure,  // another node's workers failed: spends a restart too, so
                   // every node's TORCHELASTIC_RESTART_COUNT stays equal
  kMembership,     // nodes joined or left: re-form without spending a restart
  kStoreLost,      // exit 3
  kJobClosed,      // a joining node found a mistake (e.g. --nnodes): exit 3
  kSignal,         // exit 128+N
};

// ddprun's exit codes are ddp::ExitCode (ddp/common/exit_code.hpp, docs/errors.md).
using ddp::ExitCode;
using ddp::signal_exit_code;

const char* phase_name(Phase p);

class Lifecycle {
 public:
  explicit Lifecycle(int max_restarts) : max_restarts_(max_restarts) {}

  Phase phase() const { return phase_; }
  bool is(Phase p) const { return phase_ == p; }
  bool done() const { return phase_ == Phase::kDone; }
  // Moves to `next`. Every transition the agent makes is listed in
  // lifecycle.cpp; an unlisted one is logged as an internal error (never
  // thrown: this runs inside io_context handlers).
  void enter(Phase next);

  StopReason stop_reason() const { return stop_reason_; }
  // kRunning -> kStopping for `reason`.
  void begin_stop(StopReason reason);
  // A signal while stopping for another reason: the signal decides the exit.
  void restop(StopReason reason) { stop_reason_ = reason; }

  int restart_count() const { return restart_count_; }
  int max_restarts() const { return max_restarts_; }
  bool restarts_spent() const { return restart_count_ >= max_restarts_; }
  void spend_restart() { ++restart_count_; }
  // Gives back a restart spent on something that then did not happen.
  void refund_restart() { --restart_count_; }

  // The current round, once a rendezvous completed.
  bool have_round() const { return round_.has_value(); }
  const rdzv::RendezvousResult& round() const { return *round_; }
  void set_round(const rdzv::RendezvousResult& r) { round_ = r; }

 private:
  Phase phase_ = Phase::kRendezvous;
  StopReason stop_reason_ = StopReason::kLocalFailure;
  int restart_count_ = 0;
  int max_restarts_ = 0;
  std::optional<rdzv::RendezvousResult> round_;
};

}  // namespace ddp::agent
