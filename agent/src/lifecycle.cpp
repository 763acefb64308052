#include "lifecycle.hpp"

#include "ddp/common/logging.hpp"

namespace ddp::agent {

namespace {

bool allowed(Phase from, Phase to) {
  if (to == Phase::kDone) return from != Phase::kDone;  // any end: error, signal, success
  switch (from) {
    case Phase::kRendezvous:
      return to == Phase::kRendezvous || to == Phase::kRunning;
    case Phase::kRunning:
      return to == Phase::kStopping || to == Phase::kSucceeded;
    case Phase::kStopping:
      return to == Phase::kRendezvous || to == Phase::kClosing;
    case Phase::kSucceeded:  // another node failed: rerun, or give up
      return to == Phase::kRendezvous || to == Phase::kClosing;
    case Phase::kClosing:
    case Phase::kDone:
      return false;
  }
  return false;
}

}  // namespace

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kRendezvous:
      return "rendezvous";
    case Phase::kRunning:
      return "running";
    case Phase::kStopping:
      return "stopping";
    case Phase::kSucceeded:
      return "succeeded";
    case Phase::kClosing:
      return "closing";
    case Phase::kDone:
      return "exited";
  }
  return "unknown";
}

void Lifecycle::enter(Phase next) {
  if (!allowed(phase_, next)) {
    log::get("agent")->error("internal error: agent phase {} -> {} is not a listed transition",
                             phase_name(phase_), phase_name(next));
  }
  phase_ = next;
}

void Lifecycle::begin_stop(StopReason reason) {
  enter(Phase::kStopping);
  stop_reason_ = reason;
}

}  // namespace ddp::agent
