// Wakes a Gloo TCP device's event loop every half millisecond while a group
// connects or closes.
//
// Gloo's loop (gloo/transport/tcp/loop.cc) sleeps in epoll_wait for up to
// 10 ms when no socket is ready, and a thread that takes a socket out of it
// waits for the loop's next wake-up: a pair that connects as the client
// (it drops its listening socket first), a pair that closes, and the loop's
// own end when its device goes. A full mesh connects pair after pair, each
// rank waiting for the others, so those waits add up: 10 ms for 2 ranks,
// 13-25 ms for 4 and ~70 ms for 8 on an idle 2-core box. A periodic timerfd
// in the loop's epoll set bounds each wait by its period; it is armed only
// while something waits, so a running group's loop sleeps as before.
//
// Thread-safety: construct and destroy on the group's owner thread; start()
// and stop() only set the timer and may run on any thread (two overlapping
// Awake scopes on two threads may end the wake-ups early: slower, not
// wrong). The loop thread only reads the timer in handleEvents(). Destroy it
// after the device, so that the loop is gone before the handler.
#pragma once

#include <gloo/transport/device.h>
#include <gloo/transport/tcp/loop.h>

#include <atomic>
#include <memory>

namespace ddp::detail {

class GlooLoopWaker final : public gloo::transport::tcp::Handler {
 public:
  // Registers a disarmed timer with `device`'s loop; a device that is not
  // Gloo's TCP device gets no waker (start() and stop() do nothing).
  explicit GlooLoopWaker(const std::shared_ptr<gloo::transport::Device>& device);
  ~GlooLoopWaker() override;
  GlooLoopWaker(const GlooLoopWaker&) = delete;
  GlooLoopWaker& operator=(const GlooLoopWaker&) = delete;

  void start();  // the loop wakes every period from now on
  void stop();   // and sleeps as Gloo has it again

  // While one lives, the loop wakes every period.
  class Awake {
   public:
    explicit Awake(GlooLoopWaker* waker) : waker_(waker) {
      if (waker_ != nullptr) waker_->start();
    }
    ~Awake() {
      if (waker_ != nullptr) waker_->stop();
    }
    Awake(const Awake&) = delete;
    Awake& operator=(const Awake&) = delete;

   private:
    GlooLoopWaker* waker_;
  };

  // On the loop's thread: reads the timer, so that it does not stay readable.
  void handleEvents(int events) override;

 private:
  void arm(bool on);

  std::weak_ptr<gloo::transport::Device> device_;
  // The timer; atomic for the loop's thread, which Gloo started before it was
  // set (epoll orders the two, but not as the thread sanitizer sees it).
  std::atomic<int> fd_{-1};
};

}  // namespace ddp::detail
