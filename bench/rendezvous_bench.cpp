// ddp-bench rendezvous: N simulated agents run the c10d rendezvous algorithm's
// requests (docs/rendezvous.md) against one store and form one round of N nodes;
// with --restart, one agent then reports a failure and all N re-form round 1,
// which closes as soon as the last of them is back (no last call).
//
// An agent here is one TCP connection driven by a coroutine on a single
// io_context thread, speaking the native protocol directly: 10,000 TcpStore
// clients would be 10,000 I/O threads, which measures the scheduler rather than
// the algorithm. The requests are exactly those DynamicHandler sends for one
// round of more than list_nodes_max (128) nodes of one --nproc_per_node, which
// reads no node's record; --list-nodes: every record, as a node of
// a smaller round or one of mixed counts does. --probe-connection: each agent
// first opens, pings and closes a connection of its own, as agents did before
// 2026-12-06 (one to wait out the join timeout, then the one they keep).
// Prints figures, asserts nothing.
#include <CLI/CLI.hpp>
#include <array>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "bench_cli.hpp"
#include "ddp/store/job_keys.hpp"
#include "ddp/store/protocol.hpp"
#include "echo_floor.hpp"
#include "sim_clients.hpp"

namespace ddp::bench {
namespace {

using store::Op;

struct Options {
  std::vector<int> agents = {100, 1000, 10000};
  std::string endpoint;
  std::string backend = "c10d";
  bool list_nodes = false;
  bool probe_connection = false;
  bool restart = false;
  int max_connecting = 256;  // connects in flight: past the listen backlog SYNs are dropped (1 s retry)
  int daemon_pid = 0;        // the daemon behind --endpoint, whose CPU is measured
  bool floor = false;        // then the same traffic against a bare echo server
  std::size_t fd_limit = 0;  // the open-file limit in force
};

// One simulated agent's connection: sequential request/response, byte counters.
class Conn {
 public:
  // `trace`, when given, records each write and the bytes read back after it.
  Conn(tcp::socket s, FloorTrace* trace) : sock_(std::move(s)), trace_(trace) {}

  // One request and its answer. Frames for other ids (watch events, a
  // cancelled request's last word) are noted and skipped.
  awaitable<store::Response> call(Op op, std::int64_t a, std::int64_t b, std::vector<std::string> keys,
                                  std::vector<std::string> values) {
    const auto id = co_await send(op, a, b, std::move(keys), std::move(values));
    co_return co_await answer(id);
  }

  // Sends without waiting for the answer: with what queue() holds, in one write.
  awaitable<std::uint32_t> send(Op op, std::int64_t a, std::int64_t b, std::vector<std::string> keys,
                                std::vector<std::string> values) {
    const auto id = queue(op, a, b, std::move(keys), std::move(values));
    co_await flush();
    co_return id;
  }

  // Adds a request to the next write (TcpStore's batch, or a watch cancel
  // that waits for the next request).
  std::uint32_t queue(Op op, std::int64_t a, std::int64_t b, std::vector<std::string> keys,
                      std::vector<std::string> values) {
    ++requests;
    return queue_request(out_, ++next_id_, op, a, b, std::move(keys), std::move(values));
  }

  awaitable<void> flush() {
    co_await asio::async_write(sock_, asio::buffer(out_), use_awaitable);
    sent += static_cast<long>(out_.size());
    if (trace_ != nullptr) trace_->push_back({static_cast<std::uint32_t>(out_.size()), 0});
    out_.clear();
  }

  // The answer to request `id` (sent earlier); other frames are noted and
  // skipped, a failure kept (a quiet set's answer: answered()).
  awaitable<store::Response> answer(std::uint32_t id) {
    while (true) {
      auto r = co_await read_response();
      if (r.id == id && r.status != store::Status::kEvent) co_return r;
      if (r.status == store::Status::kEvent) events_.insert(r.id);
      if (r.status != store::Status::kEvent && r.status != store::Status::kOk) failures_[r.id] = r;
    }
  }

  // The failure answered to request `id`, skipped by answer(), if any.
  std::optional<store::Response> answered(std::uint32_t id) {
    const auto it = failures_.find(id);
    if (it == failures_.end()) return std::nullopt;
    auto r = std::move(it->second);
    failures_.erase(it);
    return r;
  }

  // Until the watch of request `id` delivered an event. An unconfirmed
  // watch's refusal (COMPACTED, say) is its only answer: it ends the wait.
  awaitable<void> wait_event(std::uint32_t id) {
    while (!events_.count(id)) {
      if (const auto it = failures_.find(id); it != failures_.end()) {
        throw StoreError(std::string("watch refused: ") + store::status_name(it->second.status) + " " +
                         it->second.message);
      }
      auto r = co_await read_response();
      if (r.status == store::Status::kEvent) events_.insert(r.id);
      if (r.status != store::Status::kEvent && r.status != store::Status::kOk) failures_[r.id] = r;
    }
  }

  std::uint32_t last_id() const { return next_id_; }

  awaitable<store::Response> read_response() {
    co_await asio::async_read(sock_, asio::buffer(header_), use_awaitable);
    const auto len = store::decode_frame_length(std::string_view(header_.data(), 4));
    in_.resize(len);
    co_await asio::async_read(sock_, asio::buffer(in_), use_awaitable);
    received += 4 + static_cast<long>(len);
    if (trace_ != nullptr && !trace_->empty()) trace_->back().received += 4 + len;
    co_return store::decode_response(in_, limits_);
  }

  awaitable<void> hello() {
    std::string frame(store::kPreamble, sizeof(store::kPreamble));
    store::Request req;
    req.op = Op::kHello;
    req.a = store::kProtocolVersion;
    req.values.push_back("");
    store::encode_request(req, frame);
    co_await asio::async_write(sock_, asio::buffer(frame), use_awaitable);
    sent += static_cast<long>(frame.size());
    if (trace_ != nullptr) trace_->push_back({static_cast<std::uint32_t>(frame.size()), 0});
    ++requests;
    auto r = co_await read_response();
    if (r.status != store::Status::kOk) throw StoreError("hello refused");
  }

  long requests = 0;
  long sent = 0;
  long received = 0;

 private:
  tcp::socket sock_;
  FloorTrace* trace_;
  std::uint32_t next_id_ = 0;
  std::string out_;
  std::string in_;
  std::array<char, 4> header_{};  // a member: GCC 12 cannot keep arrays in a coroutine frame
  store::Limits limits_;
  std::set<std::uint32_t> events_;                     // watch ids that delivered an event
  std::map<std::uint32_t, store::Response> failures_;  // failures answer() skipped
};

struct Shared {
  int n = 0;
  std::string prefix;    // round prefix of this run
  std::string rdzv;      // "/<run>/rdzv/"
  std::string excluded;  // this host's exclusion key, read at a first join
  bool list_nodes = false;
  bool probe_connection = false;
  Clock::time_point start;
  Clock::time_point last_connected;
  Clock::time_point last_closed;
  Clock::time_point last_done;
  int done = 0;
  int failed = 0;
  bool restart = false;
  asio::io_context* io = nullptr;
  std::string prefix1;  // round 1's prefix (--restart)
  Clock::time_point restart_start;
  Clock::time_point restart_seen;     // the last agent saw the failure key
  Clock::time_point restart_arrived;  // the last agent's record is written
  Clock::time_point restart_closed;
  Clock::time_point restart_done;
  int restarted = 0;
  long r_requests = 0, r_bytes = 0, r_max_requests = 0, r_max_bytes = 0;
  std::string early_closer;  // which arrival closed round 1 at once
  int connecting = 0;
  int max_connecting = 0;
  long requests = 0, bytes = 0, max_requests = 0, max_bytes = 0;
  std::string first_error;
  std::vector<FloorTrace> traces;  // per agent, with --floor
  int daemon_pid = 0;
  double cpu_first_done = -1;  // the daemon's CPU (µs) once every agent watches round 0
};

// Builds a key or value list without an initializer_list: GCC 12 miscompiles
// initializer_list arrays held across co_await.
template <class... T>
std::vector<std::string> vec(T&&... items) {
  std::vector<std::string> v;
  (v.emplace_back(std::forward<T>(items)), ...);
  return v;
}

void check(const store::Response& r, const char* what) {
  if (r.status != store::Status::kOk) {
    throw StoreError(std::string(what) + ": " + store::status_name(r.status) + " " + r.message);
  }
}

// The closer's wait for the `n` node records of round `prefix`, then its
// listing of them; returns the listing's revision.
awaitable<std::int64_t> wait_and_list(Conn& c, const std::string& prefix, int n, const std::string& what) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back(prefix + "node/" + std::to_string(i));
  check(co_await c.call(Op::kWait, 0, 30000, std::move(keys), vec()), (what + " wait").c_str());
  const auto r = co_await c.call(Op::kList, 0, 0, vec(prefix + "node/"), vec());
  check(r, (what + " list").c_str());
  co_return r.revision;
}

// What a member reads of the round's records once it closed: all of them
// (--list-nodes), else none (past list_nodes_max).
awaitable<void> read_records(Conn& c, const std::string& prefix, bool list_nodes) {
  if (list_nodes) check(co_await c.call(Op::kList, 0, 0, vec(prefix + "node/"), vec()), "list nodes");
}

// DynamicHandler::arrive_and_wait of an arrival that does not close: its
// record (answered only if it fails) and the wait for the close in one write.
// Returns the close's answer.
awaitable<store::Response> set_and_wait_closed(Conn& c, std::int64_t lease, const std::string& record_key,
                                               const std::string& record, const std::string& prefix) {
  const auto set_id = c.queue(Op::kSet, lease, store::kSetQuiet, vec(record_key), vec(record));
  const auto get_id = c.queue(Op::kGet, 0, 60000, vec(prefix + "closed"), vec());
  co_await c.flush();
  auto r = co_await c.answer(get_id);
  if (const auto failed = c.answered(set_id)) check(*failed, "set record");
  check(r, "get closed");
  co_return r;
}

// start_round: the watches of round `prefix`'s nodes and control keys from
// revision `from`, in one write with whatever is queued already (watch_all),
// unconfirmed: nothing to wait for. Returns their ids: node watch, control watch.
awaitable<std::pair<std::uint32_t, std::uint32_t>> watch_round(Conn& c, const std::string& prefix,
                                                               long from) {
  const auto node_id = c.queue(Op::kWatch, store::kWatchQuiet, from, vec(prefix + "node/"), vec());
  const auto ctl_id = c.queue(Op::kWatch, store::kWatchQuiet, from, vec(prefix + "ctl/"), vec());
  co_await c.flush();
  co_return std::pair{node_id, ctl_id};
}

// After a failure report: StoreHandler::round_to_join and DynamicHandler::
// next_rendezvous for round 1, request for request, with every member of
// round 0 rejoining (the last one back closes it: try_close_early).
awaitable<void> restart_round(Conn& c, Shared& s, int id, std::int64_t lease, std::uint32_t node_watch,
                              std::uint32_t ctl_watch, std::string record) {
  auto exec = co_await asio::this_coro::executor;
  if (id == 0) {
    // The failing node reports once every agent watches round 0.
    while (s.done + s.failed < s.n) {
      asio::steady_timer t(exec, std::chrono::milliseconds(1));
      co_await t.async_wait(use_awaitable);
    }
    if (s.failed > 0) {
      s.io->stop();  // the others would wait for the failure report forever
      co_return;
    }
    s.restart_start = Clock::now();
  }
  const long requests0 = c.requests;
  const long bytes0 = c.sent + c.received;
  const std::string ended = "0 node sim_0 reported a failure: worker 0 exited with 1";
  if (id == 0) {
    // report_failure: the marker that ends the round, delivered once to every member.
    auto r = co_await c.call(Op::kCompareSet, 0, 0, vec(s.prefix + "ctl/ended"), vec("", ended));
    check(r, "report failure");
  } else {
    co_await c.wait_event(ctl_watch);  // the round monitor sees the marker
  }
  s.restart_seen = std::max(s.restart_seen, Clock::now());
  // round_to_join: the monitor's ctl watch ends (its cancel waits for the next
  // write; its node watch stays, to tell round 1 who is gone). A member that saw
  // the marker does not write it; the reporter, which did not watch for its own,
  // writes it again. The pointer moves on. All of it goes out with the arrival.
  c.queue(Op::kCancel, ctl_watch, store::kCancelQuiet, vec(), vec());
  std::uint32_t ended_id = 0;
  if (id == 0) ended_id = c.queue(Op::kCompareSet, 0, 0, vec(s.prefix + "ctl/ended"), vec("", ended));
  const auto pointer_id = c.queue(Op::kCompareSet, 0, 0, vec(s.rdzv + "round"), vec("", "1"));
  // The arrival's marker under its lease (P/joining/<id>), then the count.
  c.queue(Op::kSet, lease, 0, vec(s.prefix1 + "joining/sim_" + std::to_string(id)), vec());
  const auto add_id = c.queue(Op::kAdd, 0, (std::int64_t{1} << 32) | 1, vec(s.prefix1 + "seq"), vec());
  co_await c.flush();
  store::Response r;
  if (ended_id != 0) {
    r = co_await c.answer(ended_id);
    check(r, "compare_set ended");
  }
  r = co_await c.answer(pointer_id);
  check(r, "compare_set round");
  r = co_await c.answer(add_id);
  check(r, "add");
  const int index = static_cast<int>(r.num >> 32);
  const auto record_key = s.prefix1 + "node/" + std::to_string(index - 1);
  if (index == s.n) {
    r = co_await c.call(Op::kSet, lease, 0, vec(record_key), vec(record));
    check(r, "set record");
    s.restart_arrived = std::max(s.restart_arrived, Clock::now());
    // try_close_early: no newcomer waited, the n arrivals' records, both
    // listings, close_listing, the decision.
    r = co_await c.call(Op::kTryGet, 0, 0, vec(s.prefix + "ctl/waiting"), vec());
    r = co_await c.call(Op::kAdd, 0, 0, vec(s.prefix1 + "seq"), vec());
    check(r, "add 0");
    const auto rev = co_await wait_and_list(c, s.prefix1, s.n, "early close");
    r = co_await c.call(Op::kList, 0, 0, vec(s.prefix + "node/"), vec());
    check(r, "list round 0");
    if (static_cast<int>(r.items.size()) != s.n) throw StoreError("round 0 lost records");
    r = co_await c.call(Op::kTryGet, 0, 0, vec(s.prefix1 + "ctl/waiting"), vec());
    const std::string value = std::to_string(s.n) + " " + std::to_string(s.n) + " " + std::to_string(rev);
    r = co_await c.call(Op::kCompareSet, 0, 0, vec(s.prefix1 + "closed"), vec("", value));
    check(r, "close early");
    s.early_closer = "arrival " + std::to_string(index);
    r = co_await c.call(Op::kGet, 0, 60000, vec(s.prefix1 + "closed"), vec());
    check(r, "get closed");
  } else {
    s.restart_arrived = std::max(s.restart_arrived, Clock::now());
    r = co_await set_and_wait_closed(c, lease, record_key, record, s.prefix1);
  }
  s.restart_closed = std::max(s.restart_closed, Clock::now());
  std::istringstream in(r.items.at(0).value);
  long count = 0, workers = 0, listed = 0;
  in >> count >> workers >> listed;
  co_await read_records(c, s.prefix1, s.list_nodes);
  // start_round: both watches from the closing listing's revision + 1; the
  // kept node watch's cancel (stop_departures) goes out with them.
  c.queue(Op::kCancel, node_watch, store::kCancelQuiet, vec(), vec());
  co_await watch_round(c, s.prefix1, listed + 1);
  s.restart_done = std::max(s.restart_done, Clock::now());
  const long requests = c.requests - requests0;
  const long bytes = c.sent + c.received - bytes0;
  s.r_requests += requests;
  s.r_bytes += bytes;
  s.r_max_requests = std::max(s.r_max_requests, requests);
  s.r_max_bytes = std::max(s.r_max_bytes, bytes);
}

// DynamicHandler::next_rendezvous for a first round, request for request.
awaitable<void> agent(asio::io_context& io, tcp::endpoint ep, Shared& s, int id) {
  auto exec = co_await asio::this_coro::executor;
  try {
    while (s.connecting >= s.max_connecting) {
      asio::steady_timer t(exec, std::chrono::milliseconds(1));
      co_await t.async_wait(use_awaitable);
    }
    ++s.connecting;
    FloorTrace* trace = s.traces.empty() ? nullptr : &s.traces[id];
    long probe_requests = 0, probe_bytes = 0;
    if (s.probe_connection) {  // counted as this agent's (the echo floor replays it on its one connection)
      Conn probe(co_await connect_sim_client(ep, id), trace);
      co_await probe.hello();
      check(co_await probe.call(Op::kPing, 0, 0, vec(), vec()), "ping");
      probe_requests = probe.requests;
      probe_bytes = probe.sent + probe.received;
    }
    Conn c(co_await connect_sim_client(ep, id), trace);
    c.requests += probe_requests;
    c.sent += probe_bytes;
    co_await c.hello();
    --s.connecting;
    s.last_connected = std::max(s.last_connected, Clock::now());

    // --restart: an elastic job below MAX, where round 1 would wait the last call.
    const std::string nn =
        s.restart ? "1:" + std::to_string(2 * s.n) : std::to_string(s.n) + ":" + std::to_string(s.n);
    // round_to_join's reads, with check_job_config and the lease grant: one write.
    c.queue(Op::kTryGet, 0, 0, vec(s.rdzv + "round"), vec());
    c.queue(Op::kTryGet, 0, 0, vec(s.rdzv + "closed"), vec());
    c.queue(Op::kTryGet, 0, 0, vec(s.excluded), vec());
    const auto nnodes_id = c.queue(Op::kCompareSet, 0, 0, vec(s.rdzv + "nnodes"), vec("", nn));
    // Simulated agents send no keepalives: a TTL far past any run keeps their
    // records (10,000 expiring at once would each be sent to 10,000 watches).
    const auto lease_id = c.queue(Op::kLeaseGrant, 0, 600000, vec(), vec());
    co_await c.flush();
    auto r = co_await c.answer(nnodes_id);
    check(r, "compare_set nnodes");
    r = co_await c.answer(lease_id);
    check(r, "lease_grant");
    const std::int64_t lease = r.num;
    // The arrival's marker under its lease (P/joining/<id>) and the count: one write.
    c.queue(Op::kSet, lease, 0, vec(s.prefix + "joining/sim_" + std::to_string(id)), vec());
    const auto arrival_id = c.queue(Op::kAdd, 0, (std::int64_t{1} << 32) | 1, vec(s.prefix + "seq"), vec());
    co_await c.flush();
    r = co_await c.answer(arrival_id);
    check(r, "add");
    const int index = static_cast<int>(r.num >> 32);
    const std::string record =
        "{\"host\":\"127.0.0.1\",\"id\":\"sim_" + std::to_string(id) + "\",\"nproc\":1}";
    const auto record_key = s.prefix + "node/" + std::to_string(index - 1);
    std::string closed;
    if (index == s.n) {
      r = co_await c.call(Op::kSet, lease, 0, vec(record_key), vec(record));
      check(r, "set record");
      // The closer: wait for every record, list them, publish the decision.
      const auto rev = co_await wait_and_list(c, s.prefix, s.n, "closer");
      r = co_await c.call(Op::kTryGet, 0, 0, vec(s.prefix + "ctl/waiting"), vec());  // close_listing
      const std::string value = std::to_string(s.n) + " " + std::to_string(s.n) + " " + std::to_string(rev);
      r = co_await c.call(Op::kCompareSet, 0, 0, vec(s.prefix + "closed"), vec("", value));
      check(r, "close");
      closed = r.items.at(0).value;
    } else {
      r = co_await set_and_wait_closed(c, lease, record_key, record, s.prefix);
      closed = r.items.at(0).value;
    }
    s.last_closed = std::max(s.last_closed, Clock::now());
    std::istringstream in(closed);
    long count = 0, workers = 0, listed = 0;
    in >> count >> workers >> listed;
    co_await read_records(c, s.prefix, s.list_nodes);
    const auto [node_watch, ctl_watch] = co_await watch_round(c, s.prefix, listed + 1);
    s.last_done = std::max(s.last_done, Clock::now());
    const long bytes = c.sent + c.received;
    s.requests += c.requests;
    s.bytes += bytes;
    s.max_requests = std::max(s.max_requests, c.requests);
    s.max_bytes = std::max(s.max_bytes, bytes);
    if (++s.done == s.n && s.daemon_pid > 0) s.cpu_first_done = process_cpu_us(s.daemon_pid);
    if (s.restart && s.failed == 0) {
      co_await restart_round(c, s, id, lease, node_watch, ctl_watch, record);
      ++s.restarted;
      if (s.restarted + s.failed == s.n) io.stop();
    } else if (s.done + s.failed == s.n) {
      io.stop();  // the connections close with the io_context
    }
  } catch (const std::exception& e) {
    if (s.first_error.empty()) s.first_error = e.what();
    ++s.failed;
    if ((s.restart ? s.restarted : s.done) + s.failed == s.n) io.stop();
  }
}

// --daemon-pid and --floor: the daemon's CPU per agent by round, and per
// request beside the echo floor replaying the same writes.
void print_costs(const Options& o, const Shared& s, double cpu0) {
  const double n = s.n;
  const double total_requests = static_cast<double>(s.requests + s.r_requests);
  double daemon_us = -1;
  if (o.daemon_pid > 0) {
    const double cpu_end = settled_cpu_us(o.daemon_pid);
    daemon_us = cpu_end - cpu0;
    std::printf("%8s  daemon CPU: first round %.1f µs/agent, restart round and closes %.1f µs/agent\n", "",
                ((s.restart ? s.cpu_first_done : cpu_end) - cpu0) / n,
                s.restart ? (cpu_end - s.cpu_first_done) / n : 0.0);
  }
  if (!o.floor) return;
  if (const auto need = sim_fds_needed(s.n, 2); need > o.fd_limit) {
    // The echo server is in this process: both ends of each connection count here.
    return (void)std::printf("%8s  echo floor skipped: needs %zu file descriptors, the limit is %zu; %s\n",
                             "", need, o.fd_limit, fd_shortfall_hint(true, need).c_str());
  }
  const auto f = run_echo_floor(s.traces, o.max_connecting);
  if (!f.error.empty()) return (void)std::printf("%8s  echo floor FAILED: %s\n", "", f.error.c_str());
  const double floor_per_request = f.server_cpu_us / total_requests;
  std::printf(
      "%8s  echo floor: %.1f writes/agent of the same sizes, %.1f µs/agent, %.2f µs/request, %.3f s\n", "",
      static_cast<double>(f.writes) / n, f.server_cpu_us / n, floor_per_request, f.wall_s);
  if (daemon_us > 0)
    std::printf("%8s  per request: daemon %.2f µs, echo floor %.2f µs, ratio %.2f (%.1f requests/agent)\n",
                "", daemon_us / total_requests, floor_per_request, daemon_us / f.server_cpu_us,
                total_requests / n);
}

void run_once(const Options& o, const Endpoint& where, int n, int seq) {
  asio::io_context io(1);
  const auto ep = resolve_sim_target(io, where);
  Shared s;
  s.n = n;
  const std::string run = "bench_" + std::to_string(::getpid()) + "_" + std::to_string(seq);
  s.rdzv = "/" + run + "/rdzv/";
  s.excluded = store::keys::excluded_key(run, "127.0.0.1");
  s.prefix = s.rdzv + "round_0/";
  s.list_nodes = o.list_nodes;
  s.probe_connection = o.probe_connection;
  s.restart = o.restart;
  s.io = &io;
  s.prefix1 = s.rdzv + "round_1/";
  s.max_connecting = o.max_connecting;
  s.daemon_pid = o.daemon_pid;
  if (o.floor) s.traces.resize(static_cast<std::size_t>(n));
  const double cpu0 = o.daemon_pid > 0 ? process_cpu_us(o.daemon_pid) : -1;
  s.start = Clock::now();
  for (int i = 0; i < n; ++i) asio::co_spawn(io, agent(io, ep, s, i), asio::detached);
  io.run();
  if (s.failed > 0) {
    std::printf("%8d  FAILED: %d agents failed, first error: %s\n", n, s.failed, s.first_error.c_str());
    return;
  }
  std::printf("%8d  %10.3f  %10.3f  %10.3f  %9.1f  %8ld  %10.0f  %9ld\n", n, secs(s.last_connected - s.start),
              secs(s.last_closed - s.start), secs(s.last_done - s.start), static_cast<double>(s.requests) / n,
              s.max_requests, static_cast<double>(s.bytes) / n, s.max_bytes);
  if (s.restart) {
    std::printf(
        "%8s  restart: failure -> all closed %.3f s, all watching %.3f s, %.1f req/agent (max %ld), "
        "%.0f bytes/agent (max %ld), closed at once by %s\n",
        "", secs(s.restart_closed - s.restart_start), secs(s.restart_done - s.restart_start),
        static_cast<double>(s.r_requests) / n, s.r_max_requests, static_cast<double>(s.r_bytes) / n,
        s.r_max_bytes, s.early_closer.c_str());
    std::printf("%8s  restart phases: all saw the failure %.3f s, all arrived %.3f s\n", "",
                secs(s.restart_seen - s.restart_start), secs(s.restart_arrived - s.restart_start));
  }
  print_costs(o, s, cpu0);
  std::fflush(stdout);
}

int rendezvous_main(int argc, char** argv) {
  Options o;
  CLI::App app{"Time for N simulated agents to form one c10d rendezvous round on one store"};
  app.add_option("--agents", o.agents, "agent counts to run, one round each (default 100 1000 10000)");
  app.add_option("--endpoint", o.endpoint, "HOST:PORT of a ddp-rendezvousd; default: an in-process server");
  app.add_option("--backend", o.backend, "rendezvous algorithm (c10d)")->check(CLI::IsMember({"c10d"}));
  app.add_flag("--list-nodes", o.list_nodes,
               "each agent lists every node record (O(N) bytes per agent), as in a round of at most "
               "list_nodes_max nodes; default: none, as past it");
  app.add_flag("--probe-connection", o.probe_connection,
               "each agent first opens, pings and closes a connection of its own, as agents did before "
               "2026-12-06");
  add_max_connecting(app, o.max_connecting);
  app.add_flag("--restart", o.restart,
               "then one agent reports a failure and all re-form round 1 (--nnodes=1:2N, so only the early "
               "close of a restart round avoids the last call)");
  app.add_option("--daemon-pid", o.daemon_pid,
                 "pid of the ddp-rendezvousd behind --endpoint: print its CPU per agent and per request");
  app.add_flag("--floor", o.floor,
               "then replay each agent's writes against a bare echo server in this process, and print its "
               "CPU per request beside the daemon's");
  if (const auto code = parse_flags(app, argc, argv)) return *code;
  if (o.daemon_pid > 0 && process_cpu_us(o.daemon_pid) < 0)
    throw ConfigError("--daemon-pid: cannot read the CPU clock of process " + std::to_string(o.daemon_pid));
  const std::size_t per_agent = o.endpoint.empty() ? 2 : 1;
  const std::size_t fd_limit = raise_fd_limit_for(o.agents, "--agents", o.floor ? 2 : per_agent);
  o.fd_limit = fd_limit;
  const auto target = open_sim_target(o.endpoint);
  const Endpoint& where = target.where;
  std::printf("ddp-bench rendezvous: backend=%s store=%s (%s) list_nodes=%s\n", o.backend.c_str(),
              where.to_string().c_str(), target.server ? "in-process StoreServer" : "daemon",
              o.list_nodes ? "yes" : "no");
  std::printf("%8s  %10s  %10s  %10s  %9s  %8s  %10s  %9s\n", "agents", "connect_s", "closed_s", "watching_s",
              "req/agent", "req_max", "bytes/agent", "bytes_max");
  int seq = 0;
  for (int n : o.agents) {
    if (sim_fds_needed(n, per_agent) > fd_limit) {
      const auto need = sim_fds_needed(n, per_agent);
      std::printf("%8d  skipped: needs %zu file descriptors, the limit is %zu; %s\n", n, need, fd_limit,
                  fd_shortfall_hint(!o.endpoint.empty(), need).c_str());
      continue;
    }
    run_once(o, where, n, seq++);
  }
  return 0;
}

}  // namespace

DDP_BENCH_SUBCOMMAND("rendezvous", "N simulated agents form one c10d round on one store", rendezvous_main);

}  // namespace ddp::bench
