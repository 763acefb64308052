#include "gloo/gloo_loop_waker.hpp"

#include <gloo/transport/tcp/device.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cstdint>
#include <exception>

namespace ddp::detail {

namespace {

constexpr long kPeriodNs = 500'000;

}  // namespace

GlooLoopWaker::GlooLoopWaker(const std::shared_ptr<gloo::transport::Device>& device) {
  auto tcp = std::dynamic_pointer_cast<gloo::transport::tcp::Device>(device);
  if (!tcp) return;
  const int fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (fd < 0) return;  // no waker: the group connects at Gloo's own pace
  fd_.store(fd, std::memory_order_release);
  try {
    tcp->registerDescriptor(fd, EPOLLIN, this);
  } catch (const std::exception&) {
    // Not in the loop: no waker either (the connect that follows reports
    // what is wrong with the device, if anything).
    fd_.store(-1, std::memory_order_relaxed);
    ::close(fd);
    return;
  }
  device_ = device;
}

GlooLoopWaker::~GlooLoopWaker() {
  const int fd = fd_.load(std::memory_order_relaxed);
  if (fd < 0) return;
  // A device still alive has our handler in its loop: take it out first (the
  // loop's next wake-up, which the timer no longer brings: up to 10 ms).
  if (auto device = std::dynamic_pointer_cast<gloo::transport::tcp::Device>(device_.lock())) {
    device->unregisterDescriptor(fd, this);
  }
  ::close(fd);
}

void GlooLoopWaker::start() { arm(true); }

void GlooLoopWaker::stop() { arm(false); }

void GlooLoopWaker::arm(bool on) {
  const int fd = fd_.load(std::memory_order_relaxed);
  if (fd < 0) return;
  itimerspec spec{};
  if (on) spec.it_value.tv_nsec = spec.it_interval.tv_nsec = kPeriodNs;
  ::timerfd_settime(fd, 0, &spec, nullptr);
}

void GlooLoopWaker::handleEvents(int /*events*/) {
  std::uint64_t expirations = 0;
  [[maybe_unused]] const ssize_t n =
      ::read(fd_.load(std::memory_order_acquire), &expirations, sizeof(expirations));
}

}  // namespace ddp::detail
