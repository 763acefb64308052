// TCPStore-protocol load generator behind `ddp-bench store --protocol tcpstore`
// (see tcpstore_bench.hpp). This file registers no subcommand of its own: the
// issue names it as a mode of `store`, so store_bench.cpp calls run_tcpstore().
//
// It speaks torch 1.x's dialect (no handshake; query types SET 0, GET 2, ADD 3,
// CHECK 4, WAIT 5) the way torch 1.13's client does: blocking sockets with
// TCP_NODELAY, one connection per client thread, one request in flight, keys
// with torch's leading "/". What one timed "op" is:
//   get: WAIT(key) -> 1 byte, then GET(key) -> u64 length + value: two round
//        trips, exactly what torch 1.13's TCPStore::get sends.
//   set: SET(key, value) then CHECK(key) in one write, timed until CHECK's
//        1-byte reply. torch's SET has no reply, so without the CHECK a client
//        would only measure its own send buffer; a connection is served in
//        order, so the CHECK reply means the SET was applied.
//   add: ADD(key, 1) -> i64 new value, one round trip.
// Each request goes out in a single send(); torch's client uses one send() per
// field, which costs its client more syscalls but the servers see the same bytes.
#include "tcpstore_bench.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "bench.hpp"
#include "ddp/common/error.hpp"

namespace ddp::bench {
namespace {

using Clock = std::chrono::steady_clock;

// torch 1.x QueryType values and reply bytes.
constexpr char kSet = 0;
constexpr char kGet = 2;
constexpr char kAdd = 3;
constexpr char kCheck = 4;
constexpr char kWait = 5;
constexpr unsigned char kCheckReady = 0;
constexpr unsigned char kStopWaiting = 0;

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_str(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
}

// One blocking TCPStore connection.
class Conn {
 public:
  explicit Conn(const Endpoint& ep) : ep_(ep.to_string()) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int rc = ::getaddrinfo(ep.host.c_str(), std::to_string(ep.port).c_str(), &hints, &res);
    if (rc != 0) throw NetworkError("--endpoint " + ep_ + ": cannot resolve: " + ::gai_strerror(rc));
    int err = 0;
    for (addrinfo* ai = res; ai != nullptr && fd_ < 0; ai = ai->ai_next) {
      fd_ = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd_ >= 0 && ::connect(fd_, ai->ai_addr, ai->ai_addrlen) != 0) {
        err = errno;
        ::close(fd_);
        fd_ = -1;
      }
    }
    ::freeaddrinfo(res);
    if (fd_ < 0) throw NetworkError("--endpoint " + ep_ + ": connect failed: " + errno_text(err));
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    // A server that stops answering ends the run with an error, not a hang.
    timeval tv{30, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  ~Conn() {
    if (fd_ >= 0) ::close(fd_);
  }

  void send(const std::string& bytes) {
    std::size_t off = 0;
    while (off < bytes.size()) {
      const auto n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw NetworkError("send to " + ep_ + " failed: " + errno_text(errno));
      off += static_cast<std::size_t>(n);
    }
  }

  void recv(void* buf, std::size_t len) {
    auto* p = static_cast<char*>(buf);
    std::size_t off = 0;
    while (off < len) {
      const auto n = ::recv(fd_, p + off, len - off, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) throw NetworkError(ep_ + " closed the connection (not a TCPStore 1.x server?)");
      if (n < 0) {
        const int err = errno;
        throw NetworkError(
            "no reply from " + ep_ +
            (err == EAGAIN || err == EWOULDBLOCK ? std::string(" within 30 s") : ": " + errno_text(err)));
      }
      off += static_cast<std::size_t>(n);
    }
  }

  unsigned char recv_u8() {
    unsigned char b = 0;
    recv(&b, 1);
    return b;
  }
  std::uint64_t recv_u64() {
    unsigned char b[8];
    recv(b, 8);
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(b[i]) << (8 * i);
    return v;
  }
  std::string recv_bytes() {
    const auto len = recv_u64();
    if (len > (1u << 26)) throw ProtocolError(ep_ + " sent a value of " + std::to_string(len) + " bytes");
    std::string s(len, '\0');
    recv(s.data(), len);
    return s;
  }
  const std::string& endpoint() const { return ep_; }

 private:
  std::string ep_;
  int fd_ = -1;
};

struct Requests {
  std::string first;   // get: WAIT; set: SET+CHECK; add: ADD
  std::string second;  // get: GET
};

Requests build(const std::string& op, const std::string& key, const std::string& value) {
  Requests r;
  if (op == "get") {
    r.first.push_back(kWait);
    put_u64(r.first, 1);
    put_str(r.first, key);
    r.second.push_back(kGet);
    put_str(r.second, key);
  } else if (op == "set") {
    r.first.push_back(kSet);
    put_str(r.first, key);
    put_str(r.first, value);
    r.first.push_back(kCheck);
    put_u64(r.first, 1);
    put_str(r.first, key);
  } else {
    r.first.push_back(kAdd);
    put_str(r.first, key);
    put_u64(r.first, 1);
  }
  return r;
}

void expect(bool ok, const Conn& c, const std::string& what) {
  if (!ok) throw ProtocolError(c.endpoint() + " answered " + what);
}

void client_loop(Conn& c, const TcpstoreRun& run, int index, std::uint64_t base, std::barrier<>& start,
                 std::vector<std::int64_t>& lat) {
  const std::string key = (run.op == "add" ? "/bench/n" : "/bench/") + std::to_string(index);
  const std::string value(run.value_size, 'v');
  const auto req = build(run.op, key, value);
  lat.reserve(static_cast<std::size_t>(run.ops));
  start.arrive_and_wait();
  for (std::int64_t i = 0; i < run.ops; ++i) {
    const auto t0 = Clock::now();
    c.send(req.first);
    if (run.op == "get") {
      expect(c.recv_u8() == kStopWaiting, c, "WAIT with something other than STOP_WAITING");
      c.send(req.second);
      expect(c.recv_bytes().size() == run.value_size, c, "GET with a value of the wrong size");
    } else if (run.op == "set") {
      expect(c.recv_u8() == kCheckReady, c, "CHECK of a key just set with NOT_READY");
    } else {
      const auto n = c.recv_u64();
      const auto want = base + static_cast<std::uint64_t>(i + 1);
      expect(n == want, c, "ADD with " + std::to_string(n) + ", expected " + std::to_string(want));
    }
    lat.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
  }
}

}  // namespace

void run_tcpstore(const TcpstoreRun& run) {
  const std::string value(run.value_size, 'v');
  std::vector<std::unique_ptr<Conn>> conns;
  std::vector<std::uint64_t> bases(static_cast<std::size_t>(run.clients), 0);
  for (int c = 0; c < run.clients; ++c) {
    conns.push_back(std::make_unique<Conn>(run.endpoint));
    if (run.op == "get") {
      // Seed the key the gets read; the first WAIT is ordered after this SET.
      std::string seed(1, kSet);
      put_str(seed, "/bench/" + std::to_string(c));
      put_str(seed, value);
      conns.back()->send(seed);
    } else if (run.op == "add") {
      // ADD 0 reads the counter an earlier run on this server may have left.
      std::string probe(1, kAdd);
      put_str(probe, "/bench/n" + std::to_string(c));
      put_u64(probe, 0);
      conns.back()->send(probe);
      bases[static_cast<std::size_t>(c)] = conns.back()->recv_u64();
    }
  }
  std::barrier<> start(run.clients + 1);
  std::vector<std::vector<std::int64_t>> lats(static_cast<std::size_t>(run.clients));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(run.clients));
  std::vector<std::thread> threads;
  for (int c = 0; c < run.clients; ++c) {
    threads.emplace_back([&, c] {
      try {
        client_loop(*conns[c], run, c, bases[c], start, lats[c]);
      } catch (...) {
        errors[c] = std::current_exception();
      }
    });
  }
  start.arrive_and_wait();
  const auto t0 = Clock::now();
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }

  const auto lat = summarize_latencies(lats);
  std::printf(
      "store protocol=tcpstore op=%s clients=%d ops=%zu value_size=%zu seconds=%.3f ops_per_s=%.0f "
      "p50_us=%.1f p99_us=%.1f\n",
      run.op.c_str(), run.clients, lat.count, run.value_size, seconds,
      static_cast<double>(lat.count) / seconds, lat.p50_us, lat.p99_us);
  std::fflush(stdout);
}

}  // namespace ddp::bench
