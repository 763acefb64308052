// The daemon's side of systemd's Type=notify protocol: READY=1 once listening,
// a STATUS= line with connection and key counts every few seconds, WATCHDOG=1
// at half of WATCHDOG_USEC, STOPPING=1 on a graceful stop. Without
// NOTIFY_SOCKET (or when built without libsystemd) every call does nothing.
//
// Thread-safety: ready/stopping from the main thread; the refresh thread is
// owned here and joined by stopping() or the destructor.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace ddp::rendezvousd {

class SystemdNotifier {
 public:
  using Stats = std::function<std::map<std::string, std::int64_t>()>;

  explicit SystemdNotifier(Stats stats);
  ~SystemdNotifier();
  SystemdNotifier(const SystemdNotifier&) = delete;
  SystemdNotifier& operator=(const SystemdNotifier&) = delete;

  // READY=1 with a first STATUS=, then starts the STATUS/watchdog thread.
  void ready(const std::string& listening);
  void stopping();

 private:
  void loop();
  void send(const std::string& state);
  std::string status_line();

  Stats stats_;
  std::string listening_;
  std::chrono::microseconds watchdog_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ddp::rendezvousd
