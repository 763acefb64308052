// ddp-bench store: request throughput and latency of TcpStore clients against a
// store (ddp-rendezvousd at --endpoint, or an in-process StoreServer), and the
// memory a daemon spends on many idle connections. Prints figures, asserts nothing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "bench.hpp"
#include "bench_cli.hpp"
#include "ddp/common/endpoint.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/token_file.hpp"
#include "ddp/store/protocol.hpp"
#include "ddp/store/store_server.hpp"
#include "ddp/store/tcp_store.hpp"
#include "ddp/store/torch_proxy.hpp"
#include "tcpstore_bench.hpp"

namespace ddp::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int clients = 4;
  std::vector<int> client_counts;  // --clients 1,4,16: one run per count
  std::string protocol = "native";
  std::int64_t ops = 100000;  // per client
  std::string op = "get";
  std::string endpoint;
  std::size_t value_size = 16;
  std::string token_file;
  int idle_connections = 0;
  int server_pid = 0;
  double hold_s = 0;
  bool torch_proxy = false;
};

// One client's loop; latencies in nanoseconds go to `lat`.
void client_loop(store::TcpStore& s, const Options& o, int index, std::barrier<>& start,
                 std::vector<std::int64_t>& lat) {
  const std::string key = "bench/" + std::to_string(index);
  const std::string counter = "bench/n" + std::to_string(index);
  const std::string value(o.value_size, 'v');
  lat.reserve(static_cast<std::size_t>(o.ops));
  start.arrive_and_wait();
  for (std::int64_t i = 0; i < o.ops; ++i) {
    const auto t0 = Clock::now();
    if (o.op == "get") {
      s.get(key, std::chrono::seconds(30));
    } else if (o.op == "set") {
      s.set(key, value);
    } else if (o.op == "add") {
      s.add(counter, 1);
    } else {  // mixed: 80% get, 10% set, 10% add, like a rendezvous-heavy job
      const auto k = i % 10;
      if (k == 0) {
        s.set(key, value);
      } else if (k == 1) {
        s.add(counter, 1);
      } else {
        s.get(key, std::chrono::seconds(30));
      }
    }
    lat.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
  }
}

long read_vm_rss_kb(int pid) {
  const long kib = rss_kib(pid);
  if (kib < 0) throw ConfigError("--server-pid: cannot read VmRSS of pid " + std::to_string(pid));
  return kib;
}

// 10,000 sockets need more than the usual soft limit of 1024 descriptors
// (and 64 more for the process's own files).
void raise_fd_limit_for_idle(int wanted) {
  const std::size_t need = static_cast<std::size_t>(wanted) + 64;
  const std::size_t limit = raise_fd_limit(need);
  if (limit < need) {
    throw ConfigError("--idle-connections " + std::to_string(wanted) +
                      " needs more descriptors than the hard limit " + std::to_string(limit) +
                      " (raise it with ulimit -Hn)");
  }
}

// Opens o.idle_connections authenticated connections that then stay silent, as
// idle agents do between rendezvous rounds, and reports the server's RSS.
int run_idle(const Options& o, const store::TcpStoreOptions& base) {
  const int pid = o.server_pid > 0 ? o.server_pid : static_cast<int>(::getpid());
  raise_fd_limit_for_idle(o.idle_connections);
  const long before_kb = read_vm_rss_kb(pid);
  std::string hello(store::kPreamble, sizeof(store::kPreamble));
  store::Request req;
  req.op = store::Op::kHello;
  req.a = store::kProtocolVersion;
  req.values.push_back(base.token);
  store::encode_request(req, hello);

  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(base.endpoint.port);
  if (::inet_pton(AF_INET, base.endpoint.host == "localhost" ? "127.0.0.1" : base.endpoint.host.c_str(),
                  &addr.sin_addr) != 1) {
    throw ConfigError("--endpoint: idle-connection mode needs an IPv4 address, not '" + base.endpoint.host +
                      "'");
  }
  std::vector<int> fds;
  fds.reserve(static_cast<std::size_t>(o.idle_connections));
  const auto t0 = Clock::now();
  auto close_all = [&] {
    for (int fd : fds) ::close(fd);
  };
  for (int i = 0; i < o.idle_connections; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hello.size())) {
      const int err = errno;
      if (fd >= 0) ::close(fd);
      close_all();
      throw NetworkError("connection " + std::to_string(i + 1) + " to " + base.endpoint.to_string() +
                         " failed: " + errno_text(err));
    }
    fds.push_back(fd);
  }
  // Every HELLO answered means the server holds every connection as a session.
  std::string frame(4096, '\0');
  for (std::size_t i = 0; i < fds.size(); ++i) {
    const auto n = ::recv(fds[i], frame.data(), frame.size(), 0);
    if (n < 4) {
      close_all();
      throw NetworkError("connection " + std::to_string(i + 1) + " got no HELLO reply from " +
                         base.endpoint.to_string());
    }
    const auto resp = store::decode_response(
        std::string_view(frame.data() + 4, static_cast<std::size_t>(n) - 4), store::Limits{});
    if (resp.status != store::Status::kOk) {
      close_all();
      throw StoreError(std::string("HELLO refused: ") + store::status_name(resp.status) + " " + resp.message);
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const long after_kb = read_vm_rss_kb(pid);
  std::printf(
      "store idle_connections=%zu connect_seconds=%.2f server_rss_kb_before=%ld server_rss_kb=%ld "
      "bytes_per_connection=%.0f\n",
      fds.size(), seconds, before_kb, after_kb,
      static_cast<double>(after_kb - before_kb) * 1024.0 / static_cast<double>(fds.size()));
  std::fflush(stdout);
  if (o.hold_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(o.hold_s));
  close_all();
  return 0;
}

int run_ops(const Options& o, const store::TcpStoreOptions& base) {
  std::vector<std::unique_ptr<store::TcpStore>> stores;
  for (int c = 0; c < o.clients; ++c) {
    stores.push_back(std::make_unique<store::TcpStore>(base));
    stores.back()->set("bench/" + std::to_string(c), std::string(o.value_size, 'v'));
  }
  std::barrier<> start(o.clients + 1);
  std::vector<std::vector<std::int64_t>> lats(static_cast<std::size_t>(o.clients));
  std::vector<std::thread> threads;
  for (int c = 0; c < o.clients; ++c) {
    threads.emplace_back([&, c] { client_loop(*stores[c], o, c, start, lats[c]); });
  }
  start.arrive_and_wait();
  const auto t0 = Clock::now();
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  const auto lat = summarize_latencies(lats);
  std::printf(
      "store op=%s clients=%d ops=%zu value_size=%zu seconds=%.3f ops_per_s=%.0f p50_us=%.1f p99_us=%.1f\n",
      o.op.c_str(), o.clients, lat.count, o.value_size, seconds, static_cast<double>(lat.count) / seconds,
      lat.p50_us, lat.p99_us);
  return 0;
}

int store_main(int argc, char** argv) {
  CLI::App app{"ddp-bench store: store round trips (ops/s, p50/p99) or idle-connection memory",
               "ddp-bench store"};
  Options o;
  app.add_option("--clients", o.client_counts,
                 "client threads, each with its own connection; a list (1,4,16) runs once per count")
      ->delimiter(',');
  app.add_option("--protocol", o.protocol,
                 "native (TcpStore) or tcpstore (PyTorch 1.x TCPStore wire protocol, get|set|add)")
      ->check(CLI::IsMember({"native", "tcpstore"}));
  app.add_option("--ops", o.ops, "operations per client");
  app.add_option("--op", o.op, "get|set|add|mixed")->check(CLI::IsMember({"get", "set", "add", "mixed"}));
  app.add_option("--endpoint", o.endpoint, "HOST:PORT of a running store (default: in-process server)");
  app.add_option("--value-size", o.value_size, "bytes per value");
  app.add_option("--token-file", o.token_file, "auth token for the store");
  app.add_option("--idle-connections", o.idle_connections,
                 "instead: open this many connections (preamble + HELLO), then report server RSS");
  app.add_option("--server-pid", o.server_pid, "pid whose VmRSS to report (default: this process)");
  app.add_option("--hold", o.hold_s, "seconds to keep idle connections open after measuring");
  app.add_flag("--torch-proxy", o.torch_proxy,
               "with --protocol tcpstore: go through a TorchStoreProxy (what ddprun gives torch workers as "
               "MASTER_ADDR/MASTER_PORT) in front of the store");
  if (const auto code = parse_flags(app, argc, argv)) return *code;
  if (o.client_counts.empty()) o.client_counts.push_back(o.clients);
  const bool bad_clients =
      std::any_of(o.client_counts.begin(), o.client_counts.end(), [](int c) { return c < 1; });
  if (bad_clients || o.ops < 1 || o.idle_connections < 0) {
    std::fprintf(stderr, "ddp-bench store: --clients, --ops must be >= 1 and --idle-connections >= 0\n");
    return 2;
  }

  std::unique_ptr<store::StoreServer> server;
  store::TcpStoreOptions base;
  if (!o.token_file.empty()) base.token = read_token_file(o.token_file, "--token-file");
  if (o.endpoint.empty()) {
    store::StoreServerOptions so;
    so.host = "127.0.0.1";
    so.token = base.token;
    server = std::make_unique<store::StoreServer>(so);
    server->start();
    base.endpoint = Endpoint{"127.0.0.1", server->port()};
  } else {
    base.endpoint = parse_endpoint(o.endpoint, "--endpoint");
  }
  if (o.idle_connections > 0) return run_idle(o, base);
  if (o.protocol == "tcpstore") {
    if (o.op == "mixed") {
      std::fprintf(stderr, "ddp-bench store: --protocol tcpstore runs --op get, set or add, not mixed\n");
      return 2;
    }
    if (!base.token.empty() && !o.torch_proxy) {
      std::fprintf(stderr,
                   "ddp-bench store: --protocol tcpstore cannot present --token-file (TCPStore has no "
                   "handshake; token-protected servers refuse it) unless through --torch-proxy\n");
      return 2;
    }
    Endpoint target = base.endpoint;
    std::unique_ptr<store::TorchStoreProxy> proxy;
    if (o.torch_proxy) {
      proxy = std::make_unique<store::TorchStoreProxy>(store::TorchProxyOptions{});
      proxy->start();
      proxy->set_target({base.endpoint, base.token, "/bench/worker/round_0/"});
      target = Endpoint{"127.0.0.1", proxy->port()};
    }
    for (int clients : o.client_counts) {
      run_tcpstore(TcpstoreRun{target, clients, o.ops, o.op, o.value_size});
    }
    return 0;
  }
  for (int clients : o.client_counts) {
    o.clients = clients;
    run_ops(o, base);
  }
  return 0;
}

}  // namespace

DDP_BENCH_SUBCOMMAND("store", "store round trips (ops/s, p50/p99) and idle-connection RSS", store_main);

}  // namespace ddp::bench
