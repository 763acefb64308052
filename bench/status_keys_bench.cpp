// ddp-bench status-keys: what `ddp-store status` pays to count a big job's
// worker keys per round. It writes --keys keys under /<job>/worker/round_<r>/
// (spread over --rounds rounds, values of --value-size bytes, as torch
// workers' store keys are), then, --repeat times each and interleaved, times
// the two ways to count them: listing every key with its value and counting
// the listing (what ddp-store did), and the COUNT request (what it does now).
// Against ddp-rendezvousd at --endpoint, or an in-process StoreServer.
// Prints figures, asserts nothing.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench.hpp"
#include "bench_cli.hpp"
#include "ddp/common/endpoint.hpp"
#include "ddp/store/job_keys.hpp"
#include "ddp/store/store_server.hpp"
#include "ddp/store/tcp_store.hpp"

namespace ddp::bench {
namespace {

using Clock = std::chrono::steady_clock;
using Counts = std::map<std::int64_t, std::int64_t>;

struct Options {
  std::int64_t keys = 100000;
  int rounds = 2;
  std::size_t value_size = 64;
  int repeat = 7;
  std::string endpoint;
  int pid = 0;  // the daemon's, for its CPU time per count
};

Counts by_listing(store::Store& s, const std::string& root) {
  Counts out;
  for (const auto& kv : s.list(root).kvs) {
    if (const auto r = store::keys::worker_round_of(std::string_view(kv.key).substr(root.size()))) ++out[*r];
  }
  return out;
}

Counts by_count(store::Store& s, const std::string& root) {
  Counts out;
  for (const auto& c : s.count_children(root)) {
    if (const auto r = store::keys::worker_round_of(c.child)) out[*r] += c.keys;
  }
  return out;
}

void fill(store::Store& s, const std::string& run, const Options& o) {
  const std::string value(o.value_size, 'v');
  std::vector<std::pair<std::string, std::string>> batch;
  for (std::int64_t i = 0; i < o.keys; ++i) {
    const std::int64_t round = i % o.rounds;
    batch.emplace_back(store::keys::worker_prefix(run, round) + "rank_" + std::to_string(i), value);
    if (batch.size() == 10000 || i + 1 == o.keys) {
      s.multi_set(batch);
      batch.clear();
    }
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run_status_keys(int argc, char** argv) {
  CLI::App app{"Times counting a job's worker keys per round: list them all vs the COUNT request",
               "ddp-bench status-keys"};
  Options o;
  app.add_option("--keys", o.keys, "worker keys to write (100,000: a job of 100,000 workers)");
  app.add_option("--rounds", o.rounds, "rounds the keys are spread over");
  app.add_option("--value-size", o.value_size, "bytes per value");
  app.add_option("--repeat", o.repeat, "timed runs of each way");
  app.add_option("--endpoint", o.endpoint, "HOST:PORT of a running store (default: in-process server)");
  app.add_option("--pid", o.pid, "the daemon's pid (with --endpoint): its CPU time per count too");
  if (const auto code = parse_flags(app, argc, argv)) return *code;
  if (o.keys < 1 || o.rounds < 1 || o.repeat < 1) {
    std::fprintf(stderr, "ddp-bench status-keys: --keys, --rounds and --repeat must be >= 1\n");
    return 2;
  }
  std::unique_ptr<store::StoreServer> server;
  store::TcpStoreOptions base;
  if (o.endpoint.empty()) {
    store::StoreServerOptions so;
    so.host = "127.0.0.1";
    server = std::make_unique<store::StoreServer>(so);
    server->start();
    base.endpoint = Endpoint{"127.0.0.1", server->port()};
  } else {
    base.endpoint = parse_endpoint(o.endpoint, "--endpoint");
  }
  store::TcpStore s(base);
  const std::string run = "bench-status";
  fill(s, run, o);
  const std::string root = store::keys::worker_root(run);
  std::vector<double> listed_ms;
  std::vector<double> counted_ms;
  double listed_cpu = 0;
  double counted_cpu = 0;
  bool same = true;
  for (int i = 0; i < o.repeat; ++i) {
    double cpu = cpu_ms(o.pid);
    auto t = Clock::now();
    const Counts a = by_listing(s, root);
    listed_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
    listed_cpu += cpu_ms(o.pid) - cpu;
    cpu = cpu_ms(o.pid);
    t = Clock::now();
    const Counts b = by_count(s, root);
    counted_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
    counted_cpu += cpu_ms(o.pid) - cpu;
    same = same && a == b;
  }
  std::printf("status-keys keys=%lld rounds=%d value_bytes=%zu repeat=%d same_counts=%s\n",
              static_cast<long long>(o.keys), o.rounds, o.value_size, o.repeat, same ? "yes" : "NO");
  // The daemon's CPU per call: a mean (the kernel counts it in clock ticks).
  auto cpu = [&](double total) { return o.pid > 0 ? std::to_string(total / o.repeat) + " ms" : "-"; };
  std::printf("  list + count (before): median %.1f ms, worst %.1f ms, daemon CPU %s\n", median(listed_ms),
              *std::max_element(listed_ms.begin(), listed_ms.end()), cpu(listed_cpu).c_str());
  std::printf("  COUNT request (now):   median %.1f ms, worst %.1f ms, daemon CPU %s\n", median(counted_ms),
              *std::max_element(counted_ms.begin(), counted_ms.end()), cpu(counted_cpu).c_str());
  return same ? 0 : 1;
}

}  // namespace

DDP_BENCH_SUBCOMMAND("status-keys", "ddp-store status's worker key count: list vs COUNT, at 100,000 keys",
                     run_status_keys);

}  // namespace ddp::bench
