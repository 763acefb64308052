#include "health_gate.hpp"

#include <algorithm>

namespace ddp::agent {

namespace {

// The backoff stops doubling here: a node that recovers (a remount, a
// driver reset) should not wait much longer than that to rejoin.
constexpr std::chrono::milliseconds kMaxHealthRetryInterval{std::chrono::seconds(60)};

}  // namespace

void HealthGate::check(RendezvousCalls& rdzv, std::function<void(const HealthVerdict&)> done) {
  if (!check_) check_ = std::make_shared<HealthCheck>(cfg_);
  rdzv.check_health(check_, std::move(done));
}

std::chrono::milliseconds HealthGate::backoff() const {
  auto delay = cfg_.health.retry_interval;
  for (int i = 1; i < failures_ && delay < kMaxHealthRetryInterval; ++i) delay *= 2;
  return std::min(delay, std::max(kMaxHealthRetryInterval, cfg_.health.retry_interval));
}

void HealthGate::retry_after(std::chrono::milliseconds delay, std::function<void()> then) {
  timer_.expires_after(delay);
  timer_.async_wait([then = std::move(then)](boost::system::error_code ec) {
    if (!ec) then();
  });
}

void HealthGate::cancel() {
  if (check_) check_->cancel();
}

}  // namespace ddp::agent
