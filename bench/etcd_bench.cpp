// ddp-bench etcd-rendezvous: N agents form one round through etcd. Unlike
// `ddp-bench rendezvous` (simulated clients speaking the native protocol),
// each agent here is the real thing: an EtcdHandler (the c10d algorithm over
// its own EtcdStore) on its own thread, so the figures include HTTP, JSON and
// the watch streams. Requests are counted by etcd itself (gRPC calls started,
// from its /metrics), so nothing on the client side can under-count them.
// Prints figures, asserts nothing.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>
#include <vector>

#include "bench.hpp"
#include "bench_cli.hpp"
#include "ddp/common/error.hpp"
#include "ddp/rdzv/rendezvous.hpp"
#include "ddp/store/etcd_store.hpp"

namespace ddp::bench {
namespace {

namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;

// Sum of etcd's grpc_server_started_total over every method: the RPCs
// (unary requests, watch and keepalive streams) the member has served.
double rpcs_started(const Endpoint& ep) {
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::resolver resolver(ioc);
  boost::beast::tcp_stream stream(ioc);
  stream.connect(resolver.resolve(ep.host, std::to_string(ep.port)));
  http::request<http::empty_body> req{http::verb::get, "/metrics", 11};
  req.set(http::field::host, ep.to_string());
  http::write(stream, req);
  boost::beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(stream, buf, res);
  std::istringstream lines(res.body());
  std::string line;
  double total = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("grpc_server_started_total{", 0) != 0) continue;
    total += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return total;
}

double sum_rpcs(const std::vector<Endpoint>& eps) {
  double total = 0;
  for (const auto& ep : eps) total += rpcs_started(ep);
  return total;
}

void run_once(const std::vector<Endpoint>& eps, const std::string& prefix, int n, int seq) {
  rdzv::RendezvousConfig rc;
  rc.backend = "etcd";
  rc.run_id = "bench-" + std::to_string(::getpid()) + "-" + std::to_string(seq);
  rc.endpoint = eps.front();
  rc.etcd.endpoints = eps;
  rc.etcd.prefix = prefix;
  rc.min_nodes = n;
  rc.max_nodes = n;
  rc.list_nodes = false;
  const double before = sum_rpcs(eps);
  std::vector<std::unique_ptr<rdzv::RendezvousHandler>> handlers(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  std::string first_error;
  std::mutex error_mu;
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        rdzv::NodeSpec self{"agent-" + std::to_string(i), "127.0.0.1", 1};
        handlers[static_cast<std::size_t>(i)] = rdzv::create_handler(rc, self);
        handlers[static_cast<std::size_t>(i)]->next_rendezvous();
      } catch (const std::exception& e) {
        ++failed;
        std::lock_guard lock(error_mu);
        if (first_error.empty()) first_error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  const double closed_s = std::chrono::duration<double>(Clock::now() - start).count();
  const double rpcs = sum_rpcs(eps) - before;
  std::printf(
      "%8d  %9.3f  %10.1f  %s\n", n, closed_s, rpcs / n,
      failed ? ("failed: " + std::to_string(failed.load()) + " agents, e.g. " + first_error).c_str() : "ok");
  std::fflush(stdout);
  // Each handler revokes its lease and joins its threads: in parallel, as N
  // agents exiting would.
  std::vector<std::thread> teardown;
  for (auto& h : handlers) teardown.emplace_back([h = std::move(h)]() mutable { h.reset(); });
  for (auto& t : teardown) t.join();
}

int etcd_main(int argc, char** argv) {
  std::vector<int> agents = {100, 1000};
  std::string endpoints;
  std::string prefix = "/ddp-bench";
  CLI::App app{"Time for N real agents to form one rendezvous round through etcd"};
  app.add_option("--endpoints", endpoints, "etcd members HOST:PORT[,HOST:PORT...] (plain http)")->required();
  app.add_option("--agents", agents, "agent counts to run, one round each (default 100 1000)");
  app.add_option("--prefix", prefix, "etcd key prefix")->capture_default_str();
  if (const auto code = parse_flags(app, argc, argv)) return *code;
  const auto eps = store::parse_etcd_endpoints(endpoints, "--endpoints");
  std::printf("ddp-bench etcd-rendezvous: etcd=%s (one thread, one EtcdStore per agent)\n",
              endpoints.c_str());
  std::printf("%8s  %9s  %10s  %s\n", "agents", "closed_s", "rpcs/agent", "result");
  int seq = 0;
  for (int n : agents) {
    if (n < 1) throw ConfigError("--agents: must be at least 1");
    run_once(eps, prefix, n, seq++);
  }
  return 0;
}

}  // namespace

DDP_BENCH_SUBCOMMAND("etcd-rendezvous", "N real agents form one rendezvous round through etcd", etcd_main);

}  // namespace ddp::bench
