#include "echo_floor.hpp"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <thread>

#include "sim_clients.hpp"

namespace ddp::bench {
namespace {

// A floor frame: u32 length of the whole frame (at least 8), u32 bytes to
// answer, then padding up to the length.
constexpr std::size_t kFloorHeader = 8;

double thread_cpu_us(std::thread& t) {
  clockid_t id{};
  if (pthread_getcpuclockid(t.native_handle(), &id) != 0) return -1;
  timespec ts{};
  if (clock_gettime(id, &ts) != 0) return -1;
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

struct EchoServer {
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  std::string zeros;  // what every answer is made of: only its length matters
  std::atomic<int> accepted{0};
  std::atomic<int> closed{0};
};

// One connection: reads what is there into a small buffer (a short read
// leaves the next read parked in epoll at no extra system call), answers every
// complete frame of it in one write, reads again.
class EchoConn : public std::enable_shared_from_this<EchoConn> {
 public:
  EchoConn(tcp::socket s, EchoServer& srv) : sock_(std::move(s)), srv_(srv) {}
  void read() {
    sock_.async_read_some(asio::buffer(buf_),
                          [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                            if (ec) return self->close();
                            self->consume(n);
                            self->answer();
                          });
  }

 private:
  void consume(std::size_t n) {
    std::size_t i = 0;
    while (i < n) {
      if (skip_ > 0) {
        const auto k = std::min<std::size_t>(skip_, n - i);
        skip_ -= k;
        i += k;
        continue;
      }
      const auto k = std::min(kFloorHeader - have_, n - i);
      std::memcpy(header_ + have_, buf_.data() + i, k);
      have_ += k;
      i += k;
      if (have_ < kFloorHeader) break;
      have_ = 0;
      std::uint32_t len = 0;
      std::uint32_t reply = 0;
      std::memcpy(&len, header_, 4);
      std::memcpy(&reply, header_ + 4, 4);
      skip_ = len > kFloorHeader ? len - kFloorHeader : 0;
      owed_ += reply;
    }
  }
  void answer() {
    if (owed_ == 0) return read();
    const auto total = std::exchange(owed_, 0);
    boost::system::error_code ec;
    const auto n = sock_.write_some(asio::buffer(srv_.zeros.data(), total), ec);
    if (ec && ec != asio::error::would_block) return close();
    if (n == total) return read();
    asio::async_write(sock_, asio::buffer(srv_.zeros.data() + n, total - n),
                      [self = shared_from_this()](boost::system::error_code wec, std::size_t) {
                        if (wec) return self->close();
                        self->read();
                      });
  }
  void close() {
    boost::system::error_code ec;
    sock_.close(ec);
    ++srv_.closed;
  }

  tcp::socket sock_;
  EchoServer& srv_;
  std::array<char, 512> buf_{};
  char header_[kFloorHeader]{};
  std::size_t have_ = 0;
  std::size_t skip_ = 0;
  std::size_t owed_ = 0;
};

void accept_next(EchoServer& srv) {
  srv.acceptor.async_accept([&srv](boost::system::error_code ec, tcp::socket s) {
    if (ec) return;
    ++srv.accepted;
    s.set_option(tcp::no_delay(true), ec);
    s.non_blocking(true, ec);
    std::make_shared<EchoConn>(std::move(s), srv)->read();
    accept_next(srv);
  });
}

struct Clients {
  int n = 0;
  int done = 0;
  int failed = 0;
  int connecting = 0;
  int max_connecting = 0;
  long writes = 0;
  std::string first_error;
  const std::string* zeros = nullptr;
  std::string sink;  // every client reads its answers here: only their length matters
  asio::io_context* io = nullptr;
};

awaitable<void> floor_client(tcp::endpoint ep, const FloorTrace& trace, int index, Clients& c) {
  auto exec = co_await asio::this_coro::executor;
  try {
    while (c.connecting >= c.max_connecting) {
      asio::steady_timer t(exec, std::chrono::milliseconds(1));
      co_await t.async_wait(use_awaitable);
    }
    ++c.connecting;
    auto sock = co_await connect_sim_client(ep, index);
    --c.connecting;
    std::string header(kFloorHeader, '\0');  // a string: GCC 12 cannot keep arrays in a coroutine frame
    for (const auto& step : trace) {
      const std::uint32_t len = std::max<std::uint32_t>(step.sent, kFloorHeader);
      std::memcpy(header.data(), &len, 4);
      std::memcpy(header.data() + 4, &step.received, 4);
      const std::vector<asio::const_buffer> out{asio::buffer(header),
                                                asio::buffer(c.zeros->data(), len - kFloorHeader)};
      co_await asio::async_write(sock, out, use_awaitable);
      ++c.writes;
      if (step.received > 0)
        co_await asio::async_read(sock, asio::buffer(c.sink.data(), step.received), use_awaitable);
    }
    ++c.done;  // its connection closes here, as a simulated agent's does once it is done
    if (c.done + c.failed == c.n) c.io->stop();
  } catch (const std::exception& e) {
    if (c.first_error.empty()) c.first_error = e.what();
    ++c.failed;
    if (c.done + c.failed == c.n) c.io->stop();
  }
}

}  // namespace

FloorResult run_echo_floor(const std::vector<FloorTrace>& traces, int max_connecting) {
  std::size_t most_sent = kFloorHeader;
  std::size_t most_received = 1;
  for (const auto& t : traces) {
    for (const auto& s : t) {
      most_sent = std::max<std::size_t>(most_sent, s.sent);
      most_received = std::max<std::size_t>(most_received, s.received);
    }
  }
  EchoServer srv;
  srv.zeros.assign(std::max(most_sent, most_received), '\0');
  srv.acceptor.open(tcp::v4());
  srv.acceptor.set_option(tcp::acceptor::reuse_address(true));
  srv.acceptor.bind(tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  srv.acceptor.listen(asio::socket_base::max_listen_connections);
  const auto ep = srv.acceptor.local_endpoint();
  accept_next(srv);
  auto guard = asio::make_work_guard(srv.io);
  std::thread server([&srv] { srv.io.run(); });
  const double cpu0 = thread_cpu_us(server);
  const auto start = Clock::now();
  FloorResult r;
  {
    asio::io_context io(1);
    Clients c;
    c.n = static_cast<int>(traces.size());
    c.max_connecting = max_connecting;
    c.zeros = &srv.zeros;
    c.sink.assign(most_received, '\0');
    c.io = &io;
    for (int i = 0; i < c.n; ++i) asio::co_spawn(io, floor_client(ep, traces[i], i, c), asio::detached);
    io.run();
    r.writes = c.writes;
    if (c.failed > 0) r.error = std::to_string(c.failed) + " clients failed, first error: " + c.first_error;
  }
  // The server's share of the closes too, as the daemon's figure has it.
  for (int i = 0; i < 1000 && srv.closed.load() < srv.accepted.load(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  r.wall_s = secs(Clock::now() - start);
  r.server_cpu_us = thread_cpu_us(server) - cpu0;
  asio::post(srv.io, [&srv] {
    boost::system::error_code ec;
    srv.acceptor.close(ec);
  });
  guard.reset();
  srv.io.stop();
  server.join();
  return r;
}

double process_cpu_us(int pid) {
  clockid_t id{};
  if (clock_getcpuclockid(pid, &id) != 0) return -1;
  timespec ts{};
  if (clock_gettime(id, &ts) != 0) return -1;
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

double settled_cpu_us(int pid) {
  double last = process_cpu_us(pid);
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    const double now = process_cpu_us(pid);
    if (now - last < 100) return now;  // under 0.1 ms in 30 ms: idle
    last = now;
  }
  return last;
}

}  // namespace ddp::bench
