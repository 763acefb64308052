// How the worker group's heartbeat monitor reaches the group: deadlines go
// on the group's HangWatch, a hung worker goes through collect_then_kill like
// a FileTimer expiry (same stacks, same report, same restart).
#include "worker_group.hpp"

namespace ddp::agent {

HeartbeatMonitor::Hooks WorkerGroup::heartbeat_hooks() {
  HeartbeatMonitor::Hooks h;
  h.arm = [this](const Deadline& d) { watch_.arm(d); };
  h.disarm = [this](int lr, const std::string& source) { watch_.disarm(lr, source, ""); };
  h.running = [this](int lr) {
    if (state_ != State::kRunning || lr < 0 || static_cast<std::size_t>(lr) >= workers_.size()) return false;
    const Worker& w = workers_[static_cast<std::size_t>(lr)];
    return w.spawned && !w.done && !w.hung;
  };
  h.hung = [this](int lr, HangInfo info, std::chrono::milliseconds late) {
    collect_then_kill(lr, std::move(info), std::chrono::steady_clock::now() - late);
  };
  h.refresh_status = [this] {
    if (events_.heartbeat_ages) events_.heartbeat_ages();
  };
  return h;
}

}  // namespace ddp::agent
