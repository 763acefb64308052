// ddp-bench expiry: the whole cluster fails at once. N simulated agents each
// hold a lease with one record under a shared prefix and watch that prefix (as
// rendezvous agents watch node/), then all go silent at the same moment:
//   --mode expire  they stop sending keepalives (a partition, or a power loss
//                  the daemon's TCP stack has not noticed): every lease expires
//                  within one keepalive spread, and each still-connected
//                  watcher must learn all N deletions;
//   --mode close   their connections close (leases bound to the connection);
//                  one extra watcher, which stays, must see all N deletions.
// Measured: from the moment the leases are due (expire) or the sockets close
// (close) to every watcher holding all N deletions, and the event frames that
// took. One frame per lease expiry to every watcher is N^2 frames: 10^8 at
// 10,000 agents. Watches ask for delete runs (--watch runs, as TcpStore does),
// so a sweep's deletions reach each watcher as one item, not N; --watch plain
// measures the one-item-per-key watch. Prints figures, asserts nothing;
// --timeout-s bounds a run.
#include <CLI/CLI.hpp>
#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <memory>
#include <vector>

#include "bench_cli.hpp"
#include "ddp/store/protocol.hpp"
#include "sim_clients.hpp"

namespace ddp::bench {
namespace {

using store::Op;
using store::Status;

struct Options {
  std::vector<int> agents = {1000, 5000, 10000};
  std::string endpoint;
  std::string mode = "expire";
  int ttl_ms = 5000;  // past the set-up of 10,000 agents, which sends no keepalives
  double timeout_s = 120;
  int max_connecting = 256;
  std::string watch = "runs";
};

struct Shared {
  int n = 0;
  int ttl_ms = 0;
  bool close_mode = false;
  std::int64_t watch_flags = 0;  // kWatchDeleteRuns, or 0 for the one-item-per-key watch
  std::string prefix;
  int recorded = 0;  // agents whose record is set
  int ready = 0;     // agents whose watch is live too
  int finished = 0;  // watchers holding all n deletions
  int failed = 0;
  int connecting = 0;
  int max_connecting = 0;
  long frames = 0;            // event frames received after the failure, all watchers
  long deletes = 0;           // deletions received, all watchers
  Clock::time_point failure;  // leases due (expire) or sockets closed (close)
  Clock::time_point last_finished;
  std::vector<std::shared_ptr<tcp::socket>> sockets;
  // Cancelled when all records are set (watches opened after them, so the
  // set-up sends no N^2 put events) and when all are ready.
  std::unique_ptr<asio::steady_timer> watch_go;
  std::unique_ptr<asio::steady_timer> go;
  std::string first_error;
  asio::io_context* io = nullptr;
};

// One watcher's connection: requests go out in one write, frames are read one
// by one. A member array: GCC 12 cannot keep arrays in a coroutine frame.
struct Wire {
  std::shared_ptr<tcp::socket> sock;
  std::array<char, 4> header{};
  std::string in;
  std::string out;
  std::uint32_t next_id = 0;
  store::Limits limits;

  std::uint32_t queue(Op op, std::int64_t a, std::int64_t b, std::vector<std::string> keys,
                      std::vector<std::string> values) {
    return queue_request(out, ++next_id, op, a, b, std::move(keys), std::move(values));
  }
  awaitable<void> flush() {
    co_await asio::async_write(*sock, asio::buffer(out), use_awaitable);
    out.clear();
  }
  awaitable<store::Response> read() {
    co_await asio::async_read(*sock, asio::buffer(header), use_awaitable);
    in.resize(store::decode_frame_length(std::string_view(header.data(), 4)));
    co_await asio::async_read(*sock, asio::buffer(in), use_awaitable);
    co_return store::decode_response(in, limits);
  }
  // The answer to `id`, skipping watch events that arrive before it.
  awaitable<store::Response> answer(std::uint32_t id) {
    while (true) {
      auto r = co_await read();
      if (r.id == id && r.status != Status::kEvent) {
        if (r.status != Status::kOk) throw StoreError("request refused: " + r.message);
        co_return r;
      }
    }
  }
};

std::vector<std::string> one(std::string s) {
  std::vector<std::string> v;
  v.push_back(std::move(s));
  return v;
}

// Reads the watch `id` until it has `n` deletions; counts frames after the failure.
awaitable<void> collect(Wire& w, Shared& s, std::uint32_t id) {
  long deletes = 0;
  while (deletes < s.n) {
    auto r = co_await w.read();
    if (r.id != id || r.status != Status::kEvent) continue;
    long d = 0;
    for (const auto& item : r.items) d += static_cast<long>(store::deletions_in(item));
    if (d == 0) continue;
    deletes += d;
    s.deletes += d;
    ++s.frames;
  }
  s.last_finished = std::max(s.last_finished, Clock::now());
  if (++s.finished == (s.close_mode ? 1 : s.n)) s.io->stop();
}

awaitable<std::uint32_t> open_watch(Wire& w, const Shared& s) {
  const auto id = w.queue(Op::kWatch, s.watch_flags, 0, one(s.prefix), {});
  co_await w.flush();
  co_await w.answer(id);
  co_return id;
}

awaitable<void> hello(Wire& w) {
  store::Request req;
  req.op = Op::kHello;
  req.a = store::kProtocolVersion;
  req.values.push_back("");
  w.out.assign(store::kPreamble, sizeof(store::kPreamble));
  store::encode_request(req, w.out);
  co_await w.flush();
  co_await w.read();
}

awaitable<void> agent(tcp::endpoint ep, Shared& s, int index) {
  try {
    while (s.connecting >= s.max_connecting) {
      asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(1));
      co_await t.async_wait(use_awaitable);
    }
    ++s.connecting;
    Wire w;
    w.sock = std::make_shared<tcp::socket>(co_await connect_sim_client(ep, index));
    co_await hello(w);
    --s.connecting;
    s.sockets[static_cast<std::size_t>(index)] = w.sock;
    const std::int64_t flags = s.close_mode ? store::kLeaseBindToConnection : 0;
    auto id = w.queue(Op::kLeaseGrant, flags, s.close_mode ? 600000 : s.ttl_ms, {}, {});
    co_await w.flush();
    const auto lease = (co_await w.answer(id)).num;
    id = w.queue(Op::kSet, lease, 0, one(s.prefix + std::to_string(index)), one("{\"host\":\"127.0.0.1\"}"));
    co_await w.flush();
    co_await w.answer(id);
    boost::system::error_code ec;
    if (++s.recorded == s.n) s.watch_go->cancel();
    if (s.close_mode) {
      if (++s.ready == s.n) s.go->cancel();
      co_return;  // the socket closes with the others
    }
    // One thread: nothing runs between the check and the wait.
    if (s.recorded < s.n) co_await s.watch_go->async_wait(asio::redirect_error(use_awaitable, ec));
    const auto watch = co_await open_watch(w, s);
    if (++s.ready == s.n) s.go->cancel();
    // The last keepalive before the failure: every lease is then due within
    // the spread of these writes, as after a power loss.
    if (s.ready < s.n) co_await s.go->async_wait(asio::redirect_error(use_awaitable, ec));
    w.queue(Op::kLeaseKeepAlive, lease, 0, {}, {});
    co_await w.flush();
    co_await collect(w, s, watch);
  } catch (const std::exception& e) {
    if (s.first_error.empty()) s.first_error = e.what();
    if (++s.failed == 1) s.io->stop();
  }
}

// close mode: the one watcher that survives the failure.
awaitable<void> survivor(tcp::endpoint ep, Shared& s) {
  try {
    Wire w;
    w.sock = std::make_shared<tcp::socket>(co_await connect_sim_client(ep, s.n));
    co_await hello(w);
    const auto watch = co_await open_watch(w, s);
    boost::system::error_code ec;
    if (s.ready < s.n) co_await s.go->async_wait(asio::redirect_error(use_awaitable, ec));
    for (auto& sock : s.sockets) {
      if (sock) sock->close();
    }
    s.failure = Clock::now();
    co_await collect(w, s, watch);
  } catch (const std::exception& e) {
    if (s.first_error.empty()) s.first_error = e.what();
    if (++s.failed == 1) s.io->stop();
  }
}

void run_once(const Options& o, const Endpoint& where, int n, int seq) {
  asio::io_context io(1);
  const auto ep = resolve_sim_target(io, where);
  Shared s;
  s.n = n;
  s.close_mode = o.mode == "close";
  s.watch_flags = o.watch == "runs" ? store::kWatchDeleteRuns : 0;
  s.prefix = "/expiry_" + std::to_string(::getpid()) + "_" + std::to_string(seq) + "/node/";
  s.max_connecting = o.max_connecting;
  s.sockets.resize(static_cast<std::size_t>(n));
  s.ttl_ms = o.ttl_ms;
  s.watch_go = std::make_unique<asio::steady_timer>(io, Clock::time_point::max());
  s.go = std::make_unique<asio::steady_timer>(io, Clock::time_point::max());
  s.io = &io;
  if (s.close_mode) asio::co_spawn(io, survivor(ep, s), asio::detached);
  for (int i = 0; i < n; ++i) asio::co_spawn(io, agent(ep, s, i), asio::detached);
  const auto start = Clock::now();
  // Set up first; then the clock runs from the failure.
  while (s.ready < n && s.failed == 0 && Clock::now() - start < std::chrono::seconds(120))
    io.run_one_for(std::chrono::seconds(1));
  if (!s.close_mode) {
    io.poll();  // the keepalives go out
    s.failure = Clock::now() + std::chrono::milliseconds(o.ttl_ms);
  }
  const auto setup = Clock::now() - start;
  io.run_for(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.timeout_s)) +
             (s.close_mode ? Clock::duration::zero() : std::chrono::milliseconds(o.ttl_ms)));
  if (s.failed > 0) {
    std::printf("%8d  FAILED: %d agents, first error: %s\n", n, s.failed, s.first_error.c_str());
    return;
  }
  const long watchers = s.close_mode ? 1 : n;
  const long want = watchers * n;
  if (s.finished < watchers) {
    std::printf("%8d  %8.2f  did not finish in %.0f s: %ld of %ld deletions delivered in %ld frames\n", n,
                secs(setup), o.timeout_s, s.deletes, want, s.frames);
    return;
  }
  std::printf("%8d  %8.2f  %10.3f  %10ld  %10.2f  %12ld\n", n, secs(setup), secs(s.last_finished - s.failure),
              s.frames, static_cast<double>(s.frames) / static_cast<double>(watchers), s.deletes);
  std::fflush(stdout);
}

int expiry_main(int argc, char** argv) {
  Options o;
  CLI::App app{"N agents' leases gone at once: time and event frames until every watcher saw every deletion"};
  app.add_option("--agents", o.agents, "agent counts, one run each (default 1000 5000 10000)");
  app.add_option("--endpoint", o.endpoint, "HOST:PORT of a ddp-rendezvousd; default: an in-process server");
  app.add_option("--mode", o.mode, "expire: keepalives stop; close: connections close")
      ->check(CLI::IsMember({"expire", "close"}))
      ->capture_default_str();
  app.add_option("--watch", o.watch,
                 "runs: watches ask for delete runs (a whole sweep's node/ deletions in one item); "
                 "plain: one item per deleted key, as clients before kWatchDeleteRuns")
      ->check(CLI::IsMember({"runs", "plain"}))
      ->capture_default_str();
  app.add_option("--ttl-ms", o.ttl_ms, "lease TTL in expire mode")
      ->check(CLI::Range(100, 600000))
      ->capture_default_str();
  app.add_option("--timeout-s", o.timeout_s, "give up a run after this long")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  add_max_connecting(app, o.max_connecting);
  if (const auto code = parse_flags(app, argc, argv)) return *code;
  const std::size_t per_agent = o.endpoint.empty() ? 2 : 1;
  const std::size_t fd_limit = raise_fd_limit_for(o.agents, "--agents", per_agent);
  const auto target = open_sim_target(o.endpoint);
  std::printf("ddp-bench expiry: mode=%s watch=%s store=%s (%s) ttl_ms=%d\n", o.mode.c_str(), o.watch.c_str(),
              target.where.to_string().c_str(), target.server ? "in-process StoreServer" : "daemon",
              o.ttl_ms);
  std::printf("%8s  %8s  %10s  %10s  %10s  %12s\n", "agents", "setup_s", "all_seen_s", "frames", "frames/w",
              "deletions");
  int seq = 0;
  for (int n : o.agents) {
    if (sim_fds_needed(n + 1, per_agent) > fd_limit) {
      const auto need = sim_fds_needed(n + 1, per_agent);
      std::printf("%8d  skipped: needs %zu file descriptors, the limit is %zu; %s\n", n, need, fd_limit,
                  fd_shortfall_hint(!o.endpoint.empty(), need).c_str());
      continue;
    }
    run_once(o, target.where, n, seq++);
  }
  return 0;
}

}  // namespace

DDP_BENCH_SUBCOMMAND("expiry", "N agents' leases gone at once (mass expiry or disconnect)", expiry_main);

}  // namespace ddp::bench
