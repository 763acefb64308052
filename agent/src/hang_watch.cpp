#include "hang_watch.hpp"

#include <algorithm>
#include <vector>

namespace ddp::agent {

HangWatch::HangWatch(boost::asio::io_context& io, Expired expired)
    : timer_(io), expired_(std::move(expired)) {}

void HangWatch::arm(const Deadline& d) {
  deadlines_[Key{d.local_rank, d.source, d.scope}] = d;
  reschedule();
}

void HangWatch::disarm(int local_rank, const std::string& source, const std::string& scope) {
  if (deadlines_.erase(Key{local_rank, source, scope}) > 0) reschedule();
}

void HangWatch::clear(int local_rank) {
  std::erase_if(deadlines_, [&](const auto& kv) { return std::get<0>(kv.first) == local_rank; });
  reschedule();
}

void HangWatch::clear_all() {
  deadlines_.clear();
  reschedule();
}

bool HangWatch::armed(int local_rank, const std::string& source, const std::string& scope) const {
  return deadlines_.count(Key{local_rank, source, scope}) > 0;
}

void HangWatch::reschedule() {
  auto earliest = std::chrono::steady_clock::time_point::max();
  for (const auto& [key, d] : deadlines_) earliest = std::min(earliest, d.at);
  if (earliest == scheduled_) return;
  scheduled_ = earliest;
  if (earliest == std::chrono::steady_clock::time_point::max()) {
    timer_.cancel();
    return;
  }
  timer_.expires_at(earliest);
  timer_.async_wait([this, at = earliest](boost::system::error_code ec) {
    // A cancelled wait, or one replaced by a nearer deadline, does nothing.
    if (ec || at != scheduled_) return;
    on_timer();
  });
}

void HangWatch::on_timer() {
  scheduled_ = std::chrono::steady_clock::time_point::max();
  const auto now = std::chrono::steady_clock::now();
  std::vector<Deadline> due;
  for (auto it = deadlines_.begin(); it != deadlines_.end();) {
    if (it->second.at <= now) {
      due.push_back(it->second);
      it = deadlines_.erase(it);
    } else {
      ++it;
    }
  }
  std::sort(due.begin(), due.end(), [](const auto& a, const auto& b) { return a.at < b.at; });
  reschedule();
  // The handler may arm or clear deadlines (and kill workers): it runs last.
  for (const auto& d : due) expired_(d);
}

}  // namespace ddp::agent
