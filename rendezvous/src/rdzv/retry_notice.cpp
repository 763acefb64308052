#include "retry_notice.hpp"

#include <ctime>

#include "ddp/common/logging.hpp"
#include "ddp/common/time_bounds.hpp"

namespace ddp::rdzv::detail {

namespace {

// "12:41:07", local time; with the date when it is not today.
std::string clock_text(std::chrono::system_clock::time_point t) {
  const auto secs = std::chrono::system_clock::to_time_t(t);
  const auto now = std::time(nullptr);
  std::tm at{}, today{};
  localtime_r(&secs, &at);
  localtime_r(&now, &today);
  char buf[32];
  const bool same_day = at.tm_year == today.tm_year && at.tm_yday == today.tm_yday;
  std::strftime(buf, sizeof buf, same_day ? "%H:%M:%S" : "%Y-%m-%d %H:%M:%S", &at);
  return buf;
}

}  // namespace

RetryNotice::RetryNotice(std::string where, std::chrono::milliseconds wait, std::string wait_name)
    : where_(std::move(where)),
      wait_name_(std::move(wait_name)),
      until_(saturating_add(std::chrono::system_clock::now(), wait)) {}

void RetryNotice::operator()(const std::string& why) {
  const auto now = std::chrono::steady_clock::now();
  if (said_ && now < next_) return;
  said_ = true;
  next_ = now + kInterval;
  log::get("rdzv")->warn("cannot reach {} yet ({}); retrying until {}{}", where_, why, clock_text(until_),
                         wait_name_.empty() ? "" : " (" + wait_name_ + ")");
}

}  // namespace ddp::rdzv::detail
