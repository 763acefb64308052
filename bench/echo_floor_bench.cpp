// ddp-bench echo-floor: what any server answering N clients over TCP on this
// machine pays per connection and per round trip, from the bare echo server
// of echo_floor.cpp (one loop thread, Nagle off). Each client connects, makes
// K round trips of B bytes each way, and closes; a line per K gives the
// server's CPU per client, and a straight line through them splits it into a
// connection's part and a round trip's. Used to tell how few requests a
// rendezvous round must send before a cost per agent is reachable at all.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench_cli.hpp"
#include "echo_floor.hpp"
#include "sim_clients.hpp"

namespace ddp::bench {
namespace {

struct Options {
  int agents = 5000;
  std::vector<int> round_trips{0, 1, 2, 4, 7};
  int bytes = 100;
  int reps = 5;
  int max_connecting = 256;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int echo_floor_main(int argc, char** argv) {
  Options o;
  CLI::App app{"CPU a bare echo server spends per client: a connection and K round trips"};
  app.add_option("--agents", o.agents, "clients, all at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000000));
  app.add_option("--round-trips", o.round_trips, "round trips per client, one line each (default 0 1 2 4 7)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--bytes", o.bytes, "bytes each way per round trip (at least 8)")
      ->capture_default_str()
      ->check(CLI::Range(8, 1 << 20));
  app.add_option("--reps", o.reps, "runs per count; the median is printed")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  add_max_connecting(app, o.max_connecting);
  if (const auto code = parse_flags(app, argc, argv)) return *code;
  // The server is in this process: both ends of each connection count here.
  const std::size_t need = sim_fds_needed(o.agents, 2);
  if (raise_fd_limit(need) < need) {
    std::printf("ddp-bench echo-floor: skipped: needs %zu file descriptors; %s\n", need,
                fd_shortfall_hint(true, need).c_str());
    return 0;
  }
  std::printf("ddp-bench echo-floor: %d clients, %d bytes each way per round trip, medians of %d\n", o.agents,
              o.bytes, o.reps);
  std::printf("%12s  %16s  %14s\n", "round_trips", "server_us/client", "min-max");
  std::vector<double> xs;
  std::vector<double> ys;
  for (int k : o.round_trips) {
    const auto b = static_cast<std::uint32_t>(o.bytes);
    const std::vector<FloorTrace> traces(static_cast<std::size_t>(o.agents),
                                         FloorTrace(static_cast<std::size_t>(k), FloorStep{b, b}));
    std::vector<double> per_client;
    for (int r = 0; r < o.reps; ++r) {
      const auto f = run_echo_floor(traces, o.max_connecting);
      if (!f.error.empty()) {
        std::printf("%12d  FAILED: %s\n", k, f.error.c_str());
        return 1;
      }
      per_client.push_back(f.server_cpu_us / o.agents);
    }
    const double m = median(per_client);
    std::printf("%12d  %16.1f  %6.1f-%-6.1f\n", k, m, *std::min_element(per_client.begin(), per_client.end()),
                *std::max_element(per_client.begin(), per_client.end()));
    xs.push_back(k);
    ys.push_back(m);
  }
  if (xs.size() >= 2) {  // least squares: server µs per client = connection + K × round trip
    const double n = static_cast<double>(xs.size());
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      sx += xs[i];
      sy += ys[i];
      sxx += xs[i] * xs[i];
      sxy += xs[i] * ys[i];
    }
    const double denom = n * sxx - sx * sx;
    if (denom > 0) {
      const double slope = (n * sxy - sx * sy) / denom;
      std::printf("fit: %.1f µs per connection (accept to close) + %.2f µs per round trip\n",
                  (sy - slope * sx) / n, slope);
    }
  }
  return 0;
}

}  // namespace

DDP_BENCH_SUBCOMMAND("echo-floor", "a bare echo server's CPU per client: a connection and K round trips",
                     echo_floor_main);

}  // namespace ddp::bench
