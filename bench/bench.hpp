// ddp-bench subcommands register themselves here; main.cpp dispatches on argv[1].
// A subcommand is one file in bench/ named *_bench.cpp with one
// DDP_BENCH_SUBCOMMAND(...) line; nothing else needs editing to add one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ddp::bench {

// argc/argv start at the subcommand name (argv[0] == "store"), ready for CLI11.
using SubcommandFn = std::function<int(int argc, char** argv)>;

bool register_subcommand(const std::string& name, const std::string& summary, SubcommandFn fn);

// Round-trip latencies of all client threads together, in microseconds.
struct LatencySummary {
  std::size_t count = 0;
  double p50_us = 0;
  double p99_us = 0;
};
// Merges each thread's latencies (nanoseconds) and takes the percentiles.
LatencySummary summarize_latencies(const std::vector<std::vector<std::int64_t>>& per_thread_ns);

// Raises the soft limit on open files towards `want` (the hard limit too where
// allowed: root); returns the limit in force.
std::size_t raise_fd_limit(std::size_t want);

// VmRSS of process `pid` in KiB, from /proc/<pid>/status; -1 when unreadable.
long rss_kib(int pid);

// User + system CPU time of process `pid` in ms (/proc/<pid>/stat), -1 when unreadable.
double cpu_ms(int pid);

// Binds the unconnected IPv4 socket `fd` to loopback address 127.0.1.x, x
// chosen by `index` among 250, leaving the port to connect(): simulated
// clients then come from many addresses, as on a cluster. From one address
// the kernel's search for a free local port grows with every connection, and
// at ten thousand connections the clients' connects cost more than the
// server being measured. Returns false (socket unchanged) on error.
bool bind_spread_loopback(int fd, int index);

}  // namespace ddp::bench

#define DDP_BENCH_SUBCOMMAND(name, summary, fn) \
  static const bool ddp_bench_registered_##fn = ::ddp::bench::register_subcommand(name, summary, fn)
