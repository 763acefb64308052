#include "preauth_pool.hpp"

#include "ddp/common/logging.hpp"
#include "session.hpp"

namespace ddp::store::server {
namespace {

// A flood closes thousands of connections: one warning per period, not one each.
constexpr std::chrono::seconds kLogPeriod{10};

}  // namespace

void PreauthPool::enter(Session& s) {
  const auto seq = next_seq_++;
  if (!entries_.emplace(&s, Entry{seq, 0}).second) return;
  by_age_.emplace(seq, &s);
}

void PreauthPool::leave(Session& s) {
  const auto it = entries_.find(&s);
  if (it == entries_.end()) return;
  bytes_ -= it->second.bytes;
  by_age_.erase(it->second.seq);
  holding_.erase(it->second.seq);
  entries_.erase(it);
}

bool PreauthPool::charge(Session& s, std::size_t bytes) {
  const auto it = entries_.find(&s);
  if (it == entries_.end()) return !s.closed();
  auto& e = it->second;
  bytes_ = bytes_ - e.bytes + bytes;
  e.bytes = bytes;
  if (bytes > 0)
    holding_.emplace(e.seq, &s);
  else
    holding_.erase(e.seq);
  // Each close leaves the pool (Session::close), which shrinks bytes_.
  while (bytes_ > max_bytes_ && !holding_.empty()) {
    evict(*holding_.begin()->second, "unauthenticated request bytes over their budget");
  }
  return !s.closed();
}

bool PreauthPool::close_oldest(const char* why) {
  if (by_age_.empty()) return false;
  evict(*by_age_.begin()->second, why);
  return true;
}

void PreauthPool::evict(Session& victim, const char* why) {
  ++closed_;
  ++unlogged_;
  const auto now = std::chrono::steady_clock::now();
  if (closed_ == 1 || now - last_log_ >= kLogPeriod) {
    ddp::log::get("store.server")
        ->warn(
            "closing the oldest unauthenticated connection: {} peer={} unauthenticated={} bytes={} "
            "max_bytes={} closed_since_last_line={}",
            why, victim.peer(), entries_.size(), bytes_, max_bytes_, unlogged_);
    last_log_ = now;
    unlogged_ = 0;
  }
  const auto before = entries_.size();
  victim.close(why);
  // A session always leaves on close; if it somehow did not, drop it here
  // rather than loop on it.
  if (entries_.size() == before) leave(victim);
}

}  // namespace ddp::store::server
