// What the benches of simulated clients (bootstrap, rendezvous) share: the
// store they drive, the open-file budget for N clients, and opening one
// client's connection on the single io_context that drives them all.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench.hpp"
#include "ddp/common/endpoint.hpp"
#include "ddp/common/error.hpp"
#include "ddp/store/protocol.hpp"
#include "ddp/store/store_server.hpp"

namespace ddp::bench {

// The vocabulary of these benches' coroutines.
namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// The store under test: --endpoint's HOST:PORT or, when that is empty, an
// in-process StoreServer on 127.0.0.1 that `server` owns.
struct SimTarget {
  std::unique_ptr<store::StoreServer> server;
  Endpoint where;
};

inline SimTarget open_sim_target(const std::string& endpoint) {
  SimTarget t;
  if (endpoint.empty()) {
    store::StoreServerOptions so;
    so.host = "127.0.0.1";
    t.server = std::make_unique<store::StoreServer>(so);
    t.server->start();
    t.where = Endpoint{"127.0.0.1", t.server->port()};
  } else {
    t.where = parse_endpoint(endpoint, "--endpoint");
  }
  return t;
}

// Open files that `n` clients need: `per_client` each (2 against an in-process
// server, which holds the other end) and 256 for everything else.
inline std::size_t sim_fds_needed(int n, std::size_t per_client) {
  return static_cast<std::size_t>(n) * per_client + 256;
}

// What a run skipped for want of `need` file descriptors says to do: with an
// in-process server (no --endpoint), the server's end of every connection
// counts here too, so a daemon halves the need; with --endpoint given, only
// a higher limit helps.
inline std::string fd_shortfall_hint(bool endpoint_given, std::size_t need) {
  const std::string raise =
      "raise the open-file limit to " + std::to_string(need) + " (ulimit -n; -Hn as root, or LimitNOFILE)";
  if (endpoint_given) return raise;
  return "run ddp-rendezvousd and pass --endpoint (the in-process server holds the other end of each "
         "connection), or " +
         raise;
}

// Checks that every count given to `flag` is at least 1 and raises the
// open-file limit for the largest; returns the limit in force.
inline std::size_t raise_fd_limit_for(const std::vector<int>& counts, const std::string& flag,
                                      std::size_t per_client) {
  int most = 0;
  for (int n : counts) {
    if (n < 1) throw ConfigError(flag + ": every count must be at least 1");
    most = std::max(most, n);
  }
  return raise_fd_limit(sim_fds_needed(most, per_client));
}

// A connection to `ep` with Nagle off; against loopback IPv4 it comes from
// 127.0.1.x, x chosen by `index` (see bind_spread_loopback).
inline awaitable<tcp::socket> connect_sim_client(tcp::endpoint ep, int index) {
  tcp::socket sock(co_await asio::this_coro::executor);
  if (ep.address().is_v4() && ep.address().to_v4().is_loopback()) {
    sock.open(ep.protocol());
    bind_spread_loopback(sock.native_handle(), index);
  }
  co_await sock.async_connect(ep, use_awaitable);
  sock.set_option(tcp::no_delay(true));
  co_return sock;
}

// `where`'s address, resolved once for all the clients of a run.
inline tcp::endpoint resolve_sim_target(asio::io_context& io, const Endpoint& where) {
  tcp::resolver resolver(io);
  return resolver.resolve(where.host, std::to_string(where.port)).begin()->endpoint();
}

// Appends a native request with id `id` to `out`, the client's next write
// (several go out in one write, as TcpStore batches them); returns `id`.
inline std::uint32_t queue_request(std::string& out, std::uint32_t id, store::Op op, std::int64_t a,
                                   std::int64_t b, std::vector<std::string> keys,
                                   std::vector<std::string> values) {
  store::Request req;
  req.op = op;
  req.id = id;
  req.a = a;
  req.b = b;
  req.keys = std::move(keys);
  req.values = std::move(values);
  store::encode_request(req, out);
  return id;
}

inline double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace ddp::bench
