// ddp-bench bootstrap: N simulated torch ranks do, over PyTorch's TCPStore wire
// protocol, what init_process_group(backend="nccl", init_method="env://")
// does with a job's store before the first collective:
//   connect; with --dialect 2 also VALIDATE (magic) and PING (a nonce echoed);
//   rank 0 SETs the NCCL unique id (128 bytes), every other rank WAITs for it
//   and GETs it (torch's get is exactly WAIT + GET);
//   the store-based barrier: ADD(barrier key, 1); the rank that brings it to N
//   SETs the last-member key, and everyone WAITs for that key (torch 2.x's
//   store_util barrier; torch 1.13 polled ADD(key, 0) every 10 ms instead,
//   which would only add load to the server being measured).
// The same bytes go to any TCPStore server: ddp-rendezvousd (it serves the
// protocol on its port), an in-process StoreServer, or torch's own
// TCPStore server (scripts/bench/bootstrap_vs_torch.sh runs both and prints
// the ratio). A rank is one connection driven by a coroutine on one io_context
// thread (N threads would measure the scheduler). Prints figures, asserts
// nothing.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench_cli.hpp"
#include "sim_clients.hpp"

namespace ddp::bench {
namespace {

// Query-type numbers of the two wire generations (shared/reference: torch
// 1.13, and torch 2.2 onward where every connection opens with VALIDATE).
struct Dialect {
  int generation = 1;
  char set = 0, get = 2, add = 3, wait = 5;
};
constexpr Dialect kTorch1{1, 0, 2, 3, 5};
constexpr Dialect kTorch2{2, 1, 3, 4, 6};
constexpr char kValidate = 0;
constexpr char kPing = 13;
constexpr std::uint32_t kValidationMagic = 0x3C85F7CE;
constexpr std::size_t kNcclIdBytes = 128;  // sizeof(ncclUniqueId)

struct Options {
  std::vector<int> ranks = {100, 1000, 10000};
  std::string endpoint;
  std::string label;
  int dialect = 1;
  double timeout_s = 300;    // a run that has not finished by then is reported and abandoned
  int server_pid = 0;        // whose CPU time to report (0: none)
  int max_connecting = 256;  // connects in flight: past the listen backlog SYNs are dropped (1 s retry)
};

struct Shared {
  int n = 0;
  Dialect d;
  std::string prefix;  // "/bootstrap_<pid>_<seq>/"
  int next_rank = 0;
  int connected = 0;
  int got_id = 0;
  int done = 0;
  int failed = 0;
  long requests = 0;
  Clock::time_point start, last_connected, last_id, last_done;
  std::vector<double> done_s;  // per rank, from the start
  std::string first_error;
  asio::io_context* io = nullptr;
};

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_str(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
}
std::uint64_t get_le(const std::string& b) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < b.size(); ++i)
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(b[i])) << (8 * i);
  return v;
}

// One rank's connection: strictly one request in flight, as torch's client.
class Rank {
 public:
  Rank(tcp::socket s, Shared& sh) : sock_(std::move(s)), s_(sh) {}

  awaitable<void> send(std::string bytes) {
    out_ = std::move(bytes);
    co_await asio::async_write(sock_, asio::buffer(out_), use_awaitable);
    ++s_.requests;
  }
  awaitable<std::uint64_t> read_le(std::size_t bytes) {
    in_.resize(bytes);
    co_await asio::async_read(sock_, asio::buffer(in_), use_awaitable);
    co_return get_le(in_);
  }
  awaitable<void> wait_key(const std::string& key) {
    std::string req(1, s_.d.wait);
    put_u64(req, 1);
    put_str(req, key);
    co_await send(std::move(req));
    if (co_await read_le(1) != 0)
      throw ProtocolError("WAIT for " + key + " answered other than STOP_WAITING");
  }
  awaitable<void> set(const std::string& key, const std::string& value) {
    std::string req(1, s_.d.set);
    put_str(req, key);
    put_str(req, value);
    co_await send(std::move(req));  // no reply in either generation
  }

  awaitable<void> run(int rank) {
    const Dialect d = s_.d;
    if (d.generation == 2) {
      std::string req(1, kValidate);
      put_u32(req, kValidationMagic);
      req.push_back(kPing);
      const auto nonce = static_cast<std::uint32_t>(::getpid()) ^ static_cast<std::uint32_t>(rank);
      put_u32(req, nonce);
      co_await send(std::move(req));
      if (co_await read_le(4) != nonce) throw ProtocolError("PING answered with another nonce");
    }
    const std::string id_key = s_.prefix + "ncclUniqueId";
    if (rank == 0) {
      co_await set(id_key, std::string(kNcclIdBytes, 'i'));
    } else {
      co_await wait_key(id_key);
      std::string req(1, d.get);
      put_str(req, id_key);
      co_await send(std::move(req));
      const auto len = co_await read_le(8);
      if (len != kNcclIdBytes)
        throw ProtocolError("GET of the id returned " + std::to_string(len) + " bytes");
      co_await read_le(kNcclIdBytes);
    }
    s_.last_id = std::max(s_.last_id, Clock::now());
    ++s_.got_id;

    const std::string barrier_key = s_.prefix + "store_based_barrier_key:1";
    std::string req(1, d.add);
    put_str(req, barrier_key);
    put_u64(req, 1);
    co_await send(std::move(req));
    const auto arrived = static_cast<std::int64_t>(co_await read_le(8));
    if (arrived == s_.n) co_await set(barrier_key + "/last_member", "1");
    co_await wait_key(barrier_key + "/last_member");
  }

 private:
  tcp::socket sock_;
  Shared& s_;
  std::string out_;
  std::string in_;
};

awaitable<void> rank_main(tcp::endpoint ep, Shared& s, int rank);

// Ranks start in a window of `max_connecting`: the next one is spawned when a
// connect completes, so no coroutine waits in a polling loop.
void spawn_next(tcp::endpoint ep, Shared& s) {
  if (s.next_rank >= s.n) return;
  asio::co_spawn(*s.io, rank_main(ep, s, s.next_rank++), asio::detached);
}

awaitable<void> rank_main(tcp::endpoint ep, Shared& s, int rank) {
  auto exec = co_await asio::this_coro::executor;
  bool connected = false;
  try {
    tcp::socket sock = co_await connect_sim_client(ep, rank);
    // Closed with a reset, not into TIME_WAIT: a run of 19,000 ranks would
    // otherwise leave the next run against the same port few free local ports.
    sock.set_option(asio::socket_base::linger(true, 0));
    connected = true;
    ++s.connected;
    spawn_next(ep, s);
    s.last_connected = std::max(s.last_connected, Clock::now());
    Rank r(std::move(sock), s);
    co_await r.run(rank);
    const auto now = Clock::now();
    s.last_done = std::max(s.last_done, now);
    s.done_s.push_back(std::chrono::duration<double>(now - s.start).count());
    ++s.done;
    // Every rank keeps its connection until all are through (a process group
    // keeps its store); the io_context's stop closes them together.
    if (s.done + s.failed == s.n) s.io->stop();
  } catch (const std::exception& e) {
    if (!connected) spawn_next(ep, s);
    if (s.first_error.empty()) s.first_error = "rank " + std::to_string(rank) + ": " + e.what();
    ++s.failed;
    if (s.done + s.failed == s.n) s.io->stop();
  }
}

// utime + stime of `pid` in seconds, from /proc/<pid>/stat; -1 when unreadable.
double cpu_seconds(int pid) {
  if (pid <= 0) return -1;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return -1;
  // "pid (comm) state ppid ...": comm may hold spaces; utime, stime are fields 14, 15.
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

void run_once(const Options& o, const Endpoint& where, int n, int seq) {
  asio::io_context io(1);
  const auto ep = resolve_sim_target(io, where);
  Shared s;
  s.n = n;
  s.d = o.dialect == 2 ? kTorch2 : kTorch1;
  s.prefix = "/bootstrap_" + std::to_string(::getpid()) + "_" + std::to_string(seq) + "/";
  s.io = &io;
  s.done_s.reserve(static_cast<std::size_t>(n));
  const double cpu0 = cpu_seconds(o.server_pid);
  s.start = Clock::now();
  for (int i = 0; i < o.max_connecting; ++i) spawn_next(ep, s);
  // A server that loses a request would leave ranks waiting forever.
  asio::steady_timer deadline(
      io, std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.timeout_s)));
  bool timed_out = false;
  deadline.async_wait([&](boost::system::error_code ec) {
    if (ec) return;
    timed_out = true;
    io.stop();
  });
  io.run();
  const double cpu1 = cpu_seconds(o.server_pid);
  char server_cpu[64] = "";
  if (cpu0 >= 0 && cpu1 >= 0)
    std::snprintf(server_cpu, sizeof(server_cpu), " server_cpu_s=%.3f", cpu1 - cpu0);
  if (timed_out) {
    std::printf(
        "bootstrap server=%s dialect=%d ranks=%d FAILED: not done after %.0f s (--timeout): %d connected, %d "
        "got the id, %d past the barrier, %d failed%s%s%s\n",
        o.label.c_str(), o.dialect, n, o.timeout_s, s.connected, s.got_id, s.done, s.failed, server_cpu,
        s.first_error.empty() ? "" : "; first error: ", s.first_error.c_str());
    std::fflush(stdout);
    return;
  }
  if (s.failed > 0) {
    std::printf("bootstrap server=%s dialect=%d ranks=%d FAILED: %d ranks failed, first error: %s\n",
                o.label.c_str(), o.dialect, n, s.failed, s.first_error.c_str());
    std::fflush(stdout);
    return;
  }
  std::sort(s.done_s.begin(), s.done_s.end());
  const double p50 = s.done_s[s.done_s.size() / 2];
  std::printf(
      "bootstrap server=%s dialect=%d ranks=%d connect_s=%.3f id_s=%.3f total_s=%.3f rank_p50_s=%.3f "
      "req_per_rank=%.2f%s\n",
      o.label.c_str(), o.dialect, n, secs(s.last_connected - s.start), secs(s.last_id - s.start),
      secs(s.last_done - s.start), p50, static_cast<double>(s.requests) / n, server_cpu);
  std::fflush(stdout);
}

int bootstrap_main(int argc, char** argv) {
  Options o;
  CLI::App app{"N simulated torch ranks bootstrap a process group over the TCPStore protocol"};
  app.add_option("--ranks", o.ranks, "rank counts to run, one bootstrap each (default 100 1000 10000)");
  app.add_option("--endpoint", o.endpoint,
                 "HOST:PORT of a TCPStore server (ddp-rendezvousd or torch's); default: an in-process "
                 "StoreServer");
  app.add_option("--dialect", o.dialect,
                 "TCPStore wire generation: 1 (torch 1.x) or 2 (torch 2.2+: VALIDATE, PING)")
      ->check(CLI::IsMember({1, 2}))
      ->capture_default_str();
  app.add_option("--label", o.label, "server name printed on each line (default: ddp or the endpoint)");
  app.add_option("--timeout", o.timeout_s, "seconds a run may take before it is reported as failed")
      ->capture_default_str();
  app.add_option("--server-pid", o.server_pid,
                 "pid of the server, whose CPU seconds each run costs are printed");
  add_max_connecting(app, o.max_connecting);
  if (const auto code = parse_flags(app, argc, argv)) return *code;
  const std::size_t per_rank = o.endpoint.empty() ? 2 : 1;
  const std::size_t fd_limit = raise_fd_limit_for(o.ranks, "--ranks", per_rank);
  const auto target = open_sim_target(o.endpoint);
  const Endpoint& where = target.where;
  if (o.label.empty()) o.label = target.server ? "ddp-in-process" : where.to_string();
  int seq = 0;
  for (int n : o.ranks) {
    const std::size_t need = sim_fds_needed(n, per_rank);
    if (need > fd_limit) {
      std::printf(
          "bootstrap server=%s dialect=%d ranks=%d skipped: needs %zu file descriptors, the limit is %zu; "
          "%s\n",
          o.label.c_str(), o.dialect, n, need, fd_limit,
          fd_shortfall_hint(!o.endpoint.empty(), need).c_str());
      continue;
    }
    run_once(o, where, n, seq++);
  }
  return 0;
}

}  // namespace

DDP_BENCH_SUBCOMMAND("bootstrap", "N simulated torch ranks bootstrap a process group (TCPStore protocol)",
                     bootstrap_main);

}  // namespace ddp::bench
