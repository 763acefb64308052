#include "hang_watch.hpp"

#include <algorithm>
#include <vector>

namespace ddp::agent {

HangWatch::HangWatch(boost::asio::io_context& io, Expired expired)
    : timer_(io), expired_(std::move(expired)) {}

void HangWatch::arm(const Deadline& d) {
  auto [it, inserted] = by_key_.try_emplace(Key{d.local_rank, d.source, d.scope});
  if (inserted) {
    ++counts_[{d.local_rank, d.source}];
  } else {
    by_time_.erase({it->second.at, &it->first});
  }
  it->second = Entry{d.at, d.detail, d.signal};
  by_time_.insert({d.at, &it->first});
  reschedule();
}

HangWatch::ByKey::iterator HangWatch::erase(ByKey::iterator it) {
  by_time_.erase({it->second.at, &it->first});
  const auto count = counts_.find({std::get<0>(it->first), std::get<1>(it->first)});
  if (count != counts_.end() && --count->second == 0) counts_.erase(count);
  return by_key_.erase(it);
}

void HangWatch::disarm(int local_rank, const std::string& source, const std::string& scope) {
  const auto it = by_key_.find(Key{local_rank, source, scope});
  if (it == by_key_.end()) return;
  erase(it);
  reschedule();
}

void HangWatch::clear(int local_rank) {
  // Keys sort by local rank first: one worker's deadlines are one range.
  auto it = by_key_.lower_bound(Key{local_rank, std::string(), std::string()});
  while (it != by_key_.end() && std::get<0>(it->first) == local_rank) it = erase(it);
  reschedule();
}

void HangWatch::clear_all() {
  by_time_.clear();
  by_key_.clear();
  counts_.clear();
  reschedule();
}

bool HangWatch::armed(int local_rank, const std::string& source, const std::string& scope) const {
  return by_key_.count(Key{local_rank, source, scope}) > 0;
}

std::chrono::steady_clock::time_point HangWatch::earliest(int local_rank) const {
  auto out = std::chrono::steady_clock::time_point::max();
  auto it = by_key_.lower_bound(Key{local_rank, std::string(), std::string()});
  for (; it != by_key_.end() && std::get<0>(it->first) == local_rank; ++it)
    out = std::min(out, it->second.at);
  return out;
}

std::size_t HangWatch::count(int local_rank, const std::string& source) const {
  const auto it = counts_.find({local_rank, source});
  return it == counts_.end() ? 0 : it->second;
}

void HangWatch::reschedule() {
  const auto earliest =
      by_time_.empty() ? std::chrono::steady_clock::time_point::max() : by_time_.begin()->first;
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
  std::vector<Deadline> due;  // earliest first, as by_time_ holds them
  while (!by_time_.empty() && by_time_.begin()->first <= now) {
    const auto it = by_key_.find(*by_time_.begin()->second);
    const auto& [local_rank, source, scope] = it->first;
    due.push_back(
        Deadline{local_rank, source, scope, it->second.at, std::move(it->second.detail), it->second.signal});
    erase(it);
  }
  reschedule();
  // The handler may arm or clear deadlines (and kill workers): it runs last.
  for (const auto& d : due) expired_(d);
}

}  // namespace ddp::agent
