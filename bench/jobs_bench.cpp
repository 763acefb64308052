// ddp-bench jobs: what an operator's view of a busy daemon costs. Against a
// running ddp-rendezvousd (--endpoint, and its --metrics-port), it writes
// --jobs small jobs (2 nodes of 8 workers each, as ddprun's agents and
// handlers write them) and one job of --nodes nodes, then times the job list
// (the JOBS request `ddp-store jobs` sends), the status page's jobs list, the
// big job's first and a middle page, and /metrics, each --repeat times
// (median and worst). Meanwhile a client pings the store: its worst round trip
// while a page of the big job renders, against its worst while idle, shows
// whether the listing holds the store's loop up. With --pid, the daemon's CPU
// time per request too, a figure a busy machine spoils less than wall time.
// Prints figures, asserts nothing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "bench.hpp"
#include "bench_cli.hpp"
#include "ddp/common/endpoint.hpp"
#include "ddp/store/tcp_store.hpp"

namespace ddp::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// GET http://host:port/path; the body's size, or -1.
long http_get(const std::string& host, int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host.c_str(), &addr.sin_addr);
  long body = -1;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const auto req = "GET " + path + " HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n";
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      std::string raw;
      char buf[65536];
      for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) raw.append(buf, static_cast<std::size_t>(n));
      if (raw.rfind("HTTP/1.1 200", 0) == 0) {
        const auto at = raw.find("\r\n\r\n");
        body = at == std::string::npos ? -1 : static_cast<long>(raw.size() - at - 4);
      }
    }
  }
  ::close(fd);
  return body;
}

std::string status_record(const std::string& node, int group_rank, int world, int nproc) {
  std::string workers;
  for (int l = 0; l < nproc; ++l) {
    const int rank = group_rank * nproc + l;
    workers +=
        std::string(l ? "," : "") + R"({"local_rank":)" + std::to_string(l) + R"(,"rank":)" +
        std::to_string(rank) + R"(,"pid":)" + std::to_string(10000 + rank) +
        R"(,"state":"running","heartbeat_age_s":0.41,"heartbeats":1200,"section":"step","step_s":0.253,"steps":1200})";
  }
  return R"({"node":")" + node + R"(","host":"host-)" + node + R"(","hostname":"host-)" + node +
         R"(","restart_count":1,"max_restarts":3,"state":"running","updated":1.8e9,"group_rank":)" +
         std::to_string(group_rank) + R"(,"group_world_size":)" + std::to_string(world) +
         R"(,"rank_first":)" + std::to_string(group_rank * nproc) + R"(,"rank_last":)" +
         std::to_string(group_rank * nproc + nproc - 1) + R"(,"round":1,"workers":[)" + workers +
         R"(],"startup":{"rendezvous_s":0.012,"spawn_s":0.004},"stragglers":[]})";
}

// One job as its agents leave it while running: round 1 formed, node records,
// a status record per node, the worker's keys of the round.
void write_job(store::TcpStore& s, const std::string& run, int nodes, int nproc) {
  std::vector<std::pair<std::string, std::string>> kvs;
  const auto flush = [&] {
    if (!kvs.empty()) s.multi_set(kvs);
    kvs.clear();
  };
  const std::string root = "/" + run;
  kvs.emplace_back(root + "/rdzv/nnodes", std::to_string(nodes) + ":" + std::to_string(nodes));
  kvs.emplace_back(root + "/rdzv/round", "1");
  kvs.emplace_back(root + "/rdzv/round_0/closed",
                   std::to_string(nodes) + " " + std::to_string(nodes * nproc) + " 1");
  kvs.emplace_back(root + "/rdzv/round_0/ctl/ended",
                   "0 node n0 reported a failure: rank 3 on host-n0: exit code 1");
  kvs.emplace_back(root + "/rdzv/round_1/closed",
                   std::to_string(nodes) + " " + std::to_string(nodes * nproc) + " 2");
  kvs.emplace_back(root + "/rdzv/round_1/seq", std::to_string((std::int64_t{nodes} << 32) | (nodes * nproc)));
  for (int g = 0; g < nodes; ++g) {
    const auto node = "n" + std::to_string(g);
    kvs.emplace_back(
        root + "/rdzv/round_1/node/" + std::to_string(g),
        R"({"id":")" + node + R"(","host":"host-)" + node + R"(","nproc":)" + std::to_string(nproc) + "}");
    kvs.emplace_back(root + "/agent/status/" + node, status_record(node, g, nodes, nproc));
    for (int l = 0; l < nproc; ++l) {
      kvs.emplace_back(root + "/worker/round_1/rank_" + std::to_string(g * nproc + l), "127.0.0.1:29500");
    }
    if (kvs.size() > 20000) flush();
  }
  flush();
}

struct Timing {
  double median = 0;
  double worst = 0;
  double cpu_ms = -1;  // the daemon's CPU time per request (user + system), -1 without --pid
};

int g_daemon_pid = 0;

// Each run is timed after a write, so that the daemon lists afresh instead of
// answering from the listing it keeps while the store does not change.
template <typename F>
Timing timed(store::TcpStore& s, int repeat, F&& f) {
  std::vector<double> t;
  double cpu = 0;
  for (int i = 0; i < repeat; ++i) {
    s.set("/bench/tick", std::to_string(i));
    const double cpu_before = cpu_ms(g_daemon_pid);
    const auto start = Clock::now();
    f();
    t.push_back(ms_since(start));
    cpu += cpu_ms(g_daemon_pid) - cpu_before;
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.back(), g_daemon_pid > 0 ? cpu / repeat : -1};
}

int run(int argc, char** argv) {
  CLI::App app{"ddp-bench jobs: the job list, the status page and /metrics of a daemon holding many jobs",
               "jobs"};
  std::string endpoint_text;
  int metrics_port = 0;
  int jobs = 1000;
  int nodes = 10000;
  int nproc = 8;
  int repeat = 5;
  app.add_option("--endpoint", endpoint_text, "the daemon's store HOST:PORT")->required();
  app.add_option("--metrics-port", metrics_port, "the daemon's --metrics-port")->required();
  app.add_option("--jobs", jobs, "small jobs (2 nodes each) to write");
  app.add_option("--nodes", nodes, "nodes of the one big job (0: none)");
  app.add_option("--nproc", nproc, "workers per node");
  app.add_option("--repeat", repeat, "times each request is timed");
  app.add_option("--pid", g_daemon_pid, "the daemon's pid: also print its CPU time per request");
  if (auto code = parse_flags(app, argc, argv)) return *code;
  store::TcpStoreOptions o;
  o.endpoint = parse_endpoint(endpoint_text, "--endpoint");
  o.request_timeout = std::chrono::minutes(2);
  store::TcpStore s(o);
  auto start = Clock::now();
  for (int j = 0; j < jobs; ++j) write_job(s, "job" + std::to_string(j), 2, nproc);
  if (nodes > 0) write_job(s, "big", nodes, nproc);
  std::printf(
      "wrote %d jobs of 2 nodes and one of %d nodes (%d workers each) in %.1f s; the store holds %s keys\n",
      jobs, nodes, nproc, ms_since(start) / 1000, s.stat()["keys"].c_str());

  const auto host = o.endpoint.host;
  std::size_t listed = 0;
  const auto list = timed(s, repeat, [&] { listed = s.jobs().size(); });
  std::printf("%-34s %8zu jobs,  median %5.0f ms, worst %5.0f ms, daemon CPU %5.0f ms\n",
              "job list (JOBS, ddp-store jobs):", listed, list.median, list.worst, list.cpu_ms);
  long bytes = 0;
  const auto report = [&](const char* what, const std::string& path) {
    const auto t = timed(s, repeat, [&] { bytes = http_get(host, metrics_port, path); });
    std::printf("%-34s %8ld bytes, median %5.0f ms, worst %5.0f ms, daemon CPU %5.0f ms\n", what, bytes,
                t.median, t.worst, t.cpu_ms);
  };
  report("status page, jobs list (/):", "/");
  if (nodes > 0) {
    report("status page, big job, page 1:", "/job?id=big");
    report("status page, big job, page 50:", "/job?id=big&page=50");
  }
  report("/metrics:", "/metrics");

  // The store's loop while a page renders: worst ping idle, then during pages.
  const auto worst_ping = [&](std::atomic<bool>& stop) {
    double worst = 0;
    while (!stop.load()) {
      const auto t = Clock::now();
      s.ping();
      worst = std::max(worst, ms_since(t));
    }
    return worst;
  };
  std::atomic<bool> stop{false};
  std::thread idle_timer([&] {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    stop = true;
  });
  const double idle = worst_ping(stop);
  idle_timer.join();
  stop = false;
  std::thread pages([&] {
    for (int i = 0; i < repeat; ++i) {
      s.set("/bench/tick", std::to_string(i));
      http_get(host, metrics_port, nodes > 0 ? "/job?id=big" : "/");
    }
    stop = true;
  });
  const double busy = worst_ping(stop);
  pages.join();
  std::printf("store ping, worst round trip: %.2f ms idle, %.2f ms while pages render\n", idle, busy);
  return 0;
}

}  // namespace

DDP_BENCH_SUBCOMMAND("jobs", "the job list, status page and /metrics of a daemon holding many jobs", run);

}  // namespace ddp::bench
