// This node's workers all succeeded: the job succeeds once every node's did
// (the handler is the exit barrier), or, when that cannot be confirmed, as
// torchrun does, with this node's success.
#include <algorithm>

#include "agent_impl.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::agent {

namespace {

// The first wait between reads of the other nodes' success, doubled up to
// the cap: one store read per second while they run for hours.
constexpr std::chrono::milliseconds kFirstPollDelay{10};
constexpr std::chrono::milliseconds kMaxPollDelay{1000};

}  // namespace

void Agent::Impl::after_local_success() {
  life.enter(Phase::kSucceeded);
  log->info("all {} local workers succeeded", group->workers().size());
  rdzv->report_success([this] { poll_all_succeeded(kFirstPollDelay); },
                       [this](const std::string& m) {
                         if (life.is(Phase::kSucceeded)) {
                           succeed_unconfirmed("cannot report success: " + m);
                         }
                       });
}

void Agent::Impl::poll_all_succeeded(std::chrono::milliseconds delay) {
  if (!life.is(Phase::kSucceeded)) return;
  rdzv->all_succeeded(
      [this, delay](bool all) {
        if (!life.is(Phase::kSucceeded)) return;
        if (all) {
          // The handler is the exit barrier: the node hosting the store keeps
          // it up until the other nodes have seen this and left.
          finish(ExitCode::kOk);
          return;
        }
        // No "all done" event exists; the other nodes' workers may run for hours,
        // so back off to one store read per second.
        poll_timer.expires_after(delay);
        poll_timer.async_wait(
            [this, next = std::min(delay * 2, kMaxPollDelay)](boost::system::error_code ec) {
              if (!ec) poll_all_succeeded(next);
            });
      },
      [this](const std::string& m) {
        if (life.is(Phase::kSucceeded)) succeed_unconfirmed(m);
      });
}

void Agent::Impl::succeed_unconfirmed(const std::string& why) {
  // torchrun's exit barrier does the same: this node's workers succeeded, and a
  // store that vanished afterwards (often: the hosting node finished first)
  // does not turn that into a failure. A node still running sees the loss itself.
  log->warn(
      "this node's workers succeeded, but the other nodes' success could not be "
      "confirmed: {}",
      why);
  finish(ExitCode::kOk);
}

}  // namespace ddp::agent
