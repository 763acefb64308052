#include "systemd_notifier.hpp"

#include <algorithm>

#ifdef DDP_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "ddp/common/logging.hpp"

namespace ddp::rendezvousd {
namespace {

// STATUS= is for `systemctl status`; a few seconds is fresh enough and costs
// one stats round trip to the loop thread.
constexpr std::chrono::seconds kStatusInterval{5};

}  // namespace

SystemdNotifier::SystemdNotifier(Stats stats) : stats_(std::move(stats)) {}

SystemdNotifier::~SystemdNotifier() { stopping(); }

void SystemdNotifier::send(const std::string& state) {
#ifdef DDP_HAVE_SYSTEMD
  // unset_environment=0: workers are not our children, and a restart of the
  // notifier logic must still find the socket.
  const int rc = sd_notify(0, state.c_str());
  if (rc < 0) ddp::log::get("store.server")->warn("sd_notify failed state=\"{}\" errno={}", state, -rc);
#else
  (void)state;
#endif
}

std::string SystemdNotifier::status_line() {
  std::map<std::string, std::int64_t> s;
  try {
    s = stats_();
  } catch (const std::exception& e) {
    return "STATUS=listening on " + listening_ + "; not answering: " + e.what();
  }
  return "STATUS=listening on " + listening_ + "; connections=" + std::to_string(s["connections"]) +
         " keys=" + std::to_string(s["keys"]) + " leases=" + std::to_string(s["leases"]) +
         " watches=" + std::to_string(s["watches"]) +
         (s["degraded"] != 0 ? "; DEGRADED: data dir refuses writes (disk full?), reads still served" : "");
}

void SystemdNotifier::ready(const std::string& listening) {
  listening_ = listening;
  send("READY=1\n" + status_line());
#ifdef DDP_HAVE_SYSTEMD
  std::uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0) watchdog_ = std::chrono::microseconds(usec);
#endif
  thread_ = std::thread([this] { loop(); });
}

void SystemdNotifier::loop() {
  // Pings at half the watchdog interval so one late wake-up does not kill us.
  const auto ping = watchdog_.count() > 0
                        ? std::chrono::duration_cast<std::chrono::milliseconds>(watchdog_ / 2)
                        : std::chrono::milliseconds(kStatusInterval);
  const auto tick =
      std::max(std::chrono::milliseconds(1), std::min<std::chrono::milliseconds>(ping, kStatusInterval));
  auto next_status = std::chrono::steady_clock::now() + kStatusInterval;
  std::unique_lock<std::mutex> lk(mu_);
  while (!cv_.wait_for(lk, tick, [this] { return stop_; })) {
    lk.unlock();
    // The stats round trip goes through the loop thread, so a wedged loop stops
    // the pings and systemd restarts us: the watchdog watches the server, not
    // just this thread.
    std::string state;
    bool answered = true;
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_status) {
      state = status_line();
      answered = state.find("; not answering: ") == std::string::npos;
      next_status = now + kStatusInterval;
    } else if (watchdog_.count() > 0) {
      try {
        stats_();
      } catch (const std::exception&) {
        answered = false;
      }
    }
    if (watchdog_.count() > 0 && answered) {
      if (!state.empty()) state.push_back('\n');
      state.append("WATCHDOG=1");
    }
    if (!state.empty()) send(state);
    lk.lock();
  }
}

void SystemdNotifier::stopping() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
    send("STOPPING=1");
  }
}

}  // namespace ddp::rendezvousd
