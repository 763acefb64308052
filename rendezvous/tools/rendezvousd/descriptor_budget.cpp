#include "descriptor_budget.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <filesystem>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "metrics_http.hpp"

namespace ddp::rendezvousd {
namespace {

// The daemon's own descriptors opened after the measurement: two event loops
// (epoll, eventfd, timerfd each), two listening sockets, the data dir's log,
// snapshot temp file and directory, the systemd notify socket, /proc reads.
// About 15; twice that leaves room for what a library opens on its own.
constexpr std::uint64_t kOwnDescriptors = 32;

std::uint64_t open_descriptors() {
  std::error_code ec;
  std::uint64_t n = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec))
    ++n;
  // Unreadable /proc: assume the three standard streams and a few more.
  return ec || n == 0 ? 8 : n;
}

}  // namespace

DescriptorBudget measure_descriptors(bool metrics_port) {
  DescriptorBudget b;
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0) {
    if (r.rlim_cur < r.rlim_max) {
      rlimit raised = r;
      raised.rlim_cur = r.rlim_max;
      if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) r = raised;
    }
    b.limit = r.rlim_cur == RLIM_INFINITY ? std::uint64_t{1} << 32 : r.rlim_cur;
  } else {
    b.limit = std::uint64_t{1} << 32;  // unknown: do not second-guess max_connections
  }
  b.in_use = open_descriptors();
  // The metrics port's connections plus its listening socket.
  b.reserved = kOwnDescriptors + (metrics_port ? MetricsHttp::kMaxConnections + 1 : 0);
  b.connections = b.limit > b.in_use + b.reserved ? b.limit - b.in_use - b.reserved : 0;
  return b;
}

void fit_max_connections(DaemonSettings& settings, const DescriptorBudget& budget) {
  auto& max = settings.server.max_connections;
  if (budget.connections >= max) return;
  auto log = ddp::log::get("store.server");
  if (budget.connections == 0) {
    throw ConfigError("RLIMIT_NOFILE is " + std::to_string(budget.limit) +
                      ", which leaves no descriptor for " + "store clients (" +
                      std::to_string(budget.in_use) + " open, " + std::to_string(budget.reserved) +
                      " kept for the daemon); raise LimitNOFILE (ulimit -n)");
  }
  if (!settings.max_connections_set) {
    // The "listening" line shows the value; this says where it came from.
    log->debug(
        "max_connections lowered to {}: that is what RLIMIT_NOFILE={} leaves ({} open, {} kept for the "
        "daemon's files and the metrics port); raise LimitNOFILE (ulimit -n) for more clients",
        budget.connections, budget.limit, budget.in_use, budget.reserved);
    max = static_cast<std::uint32_t>(budget.connections);
    return;
  }
  log->warn(
      "max_connections={} is more than RLIMIT_NOFILE={} leaves for clients ({}); past that, accept() runs "
      "out "
      "of descriptors and clients wait; raise LimitNOFILE (ulimit -n) or lower max_connections",
      max, budget.limit, budget.connections);
}

}  // namespace ddp::rendezvousd
