// libFuzzer target: bytes from one client through a real Session and the
// Dispatcher (store semantics, waiters, watches, leases), without a network:
// the session's socket is one end of a socketpair, the input is written to the
// other end, and the loop runs until the session has read everything and seen
// EOF. Input: the first byte's low bit prepends the native preamble and a
// HELLO (so most inputs reach the store); the rest is the client's byte stream.
// A fresh dispatcher per input keeps runs reproducible.
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ddp/common/logging.hpp"
#include "ddp/store/protocol.hpp"
#include "dispatcher.hpp"
#include "session.hpp"

using namespace ddp::store;
namespace asio = boost::asio;

namespace {

// Why 256 KiB: well under a socketpair's buffer once SO_SNDBUF is raised, so
// the whole input is written before the loop runs, and big enough for frames.
constexpr std::size_t kMaxInput = 256 * 1024;

std::string hello_prefix() {
  std::string out(kPreamble, sizeof kPreamble);
  Request hello;
  hello.op = Op::kHello;
  hello.id = 1;
  hello.a = kProtocolVersion;
  encode_request(hello, out);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ddp::log::get("store.server")->set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0 || size > kMaxInput) return 0;
  std::string input = (data[0] & 1) != 0 ? hello_prefix() : std::string();
  input.append(reinterpret_cast<const char*>(data) + 1, size - 1);

  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return 0;
  const int buf = 4 << 20;
  ::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  ::setsockopt(fds[0], SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  std::size_t written = 0;
  while (written < input.size()) {
    const auto n = ::write(fds[1], input.data() + written, input.size() - written);
    if (n <= 0) break;
    written += static_cast<std::size_t>(n);
  }
  ::shutdown(fds[1], SHUT_WR);  // EOF after the input: the session then closes

  asio::io_context io;
  StoreServerOptions options;
  options.limits.max_frame_bytes = 64 * 1024;
  options.limits.max_value_bytes = 32 * 1024;
  options.limits.max_pending_per_connection = 64;
  options.history_max_bytes = 64 * 1024;
  server::Dispatcher dispatcher(io, options);
  std::string read_buffer(64 * 1024, '\0');
  std::size_t buffered_total = 0;
  server::SessionOptions so;
  so.limits = options.limits;
  so.max_queued_bytes = 1 << 20;
  so.max_buffered_request_bytes = 1 << 20;
  so.buffered_total = &buffered_total;
  so.preauth = &dispatcher.preauth();
  {
    asio::ip::tcp::socket socket(io);
    socket.assign(asio::ip::tcp::v4(), fds[0]);  // a stream fd is all the session needs
    auto session = std::make_shared<server::Session>(std::move(socket), dispatcher, so, &read_buffer);
    dispatcher.add_session(session);
    session->start();
    // Run until the session closed, reading its replies so it never stalls on
    // a full socket; then run what is ready. Armed timers (waiter deadlines,
    // leases) are left pending, never waited for.
    char sink[64 * 1024];
    for (int turns = 0; turns < 10000 && !session->closed(); ++turns) {
      io.run_one_for(std::chrono::milliseconds(10));
      while (::recv(fds[1], sink, sizeof sink, MSG_DONTWAIT) > 0) {
      }
    }
    if (!session->closed()) __builtin_trap();  // EOF was written: the session must close
    while (io.poll() > 0) {
    }
  }
  if (buffered_total != 0) __builtin_trap();  // the global counter returns to zero
  if (dispatcher.preauth().size() != 0 || dispatcher.preauth().bytes() != 0) __builtin_trap();
  ::close(fds[1]);
  return 0;
}
