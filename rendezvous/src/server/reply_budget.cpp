#include "reply_budget.hpp"

#include "ddp/common/logging.hpp"
#include "session.hpp"

namespace ddp::store::server {
namespace {

// A flood of lazy watchers drops hundreds of connections: one warning per
// period, not one each.
constexpr std::chrono::seconds kLogPeriod{10};

}  // namespace

void ReplyBudget::charge(Session& s, std::size_t before, std::size_t after) {
  bytes_ = bytes_ - before + after;
  if (before >= kTrackedBytes) large_.erase({before, &s});
  if (after >= kTrackedBytes) large_.insert({after, &s});
  while (max_bytes_ > 0 && bytes_ > max_bytes_) {
    if (!large_.empty()) {
      const auto [held, victim] = *large_.rbegin();
      large_.erase(std::prev(large_.end()));
      drop(*victim, held);
    } else if (after > 0 && !s.closed()) {
      // Thousands of small holders: the one that went over goes.
      drop(s, after);
      after = 0;
    } else {
      break;
    }
  }
}

void ReplyBudget::drop(Session& victim, std::size_t held) {
  bytes_ -= held;
  ++dropped_;
  ++unlogged_;
  const auto now = std::chrono::steady_clock::now();
  if (dropped_ == 1 || now - last_log_ >= kLogPeriod) {
    ddp::log::get("store.server")
        ->warn(
            "closing connection: it holds the most unread replies while all clients' together are over the "
            "server's budget peer={} queued_bytes={} total_bytes={} max_queued_reply_bytes={} "
            "closed_since_last_line={}",
            victim.peer(), held, bytes_ + held, max_bytes_, unlogged_);
    last_log_ = now;
    unlogged_ = 0;
  }
  victim.drop_replies("unread replies over the server's budget");
}

}  // namespace ddp::store::server
