#include "raw_client.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>

namespace ddp::test {

using namespace store;
using Clock = std::chrono::steady_clock;

RawClient::RawClient(int port, int receive_buffer_bytes) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  // Before connect: the window it advertises follows from it.
  if (receive_buffer_bytes > 0)
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer_bytes, sizeof receive_buffer_bytes);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd_);
    throw std::runtime_error("connect to 127.0.0.1:" + std::to_string(port) + " failed");
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

RawClient::~RawClient() { ::close(fd_); }

void RawClient::send_bytes(const std::string& bytes) {
  std::size_t off = 0;
  while (off < bytes.size()) {
    const auto n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the server may have closed us; tests look at recv/closed_by_peer
    off += static_cast<std::size_t>(n);
  }
}

void RawClient::shutdown_write() { ::shutdown(fd_, SHUT_WR); }

void RawClient::send_preamble() { send_bytes(std::string(kPreamble, sizeof kPreamble)); }

void RawClient::send(const Request& req) {
  std::string frame;
  encode_request(req, frame);
  send_bytes(frame);
}

bool RawClient::read_exact(char* out, std::size_t n, Clock::time_point deadline) {
  std::size_t got = 0;
  while (got < n) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const auto r = ::recv(fd_, out + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<std::size_t>(r);
  }
  return true;
}

std::optional<Response> RawClient::recv(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  char header[4];
  if (!read_exact(header, 4, deadline)) return std::nullopt;
  const auto len = decode_frame_length(std::string_view(header, 4));
  std::string body(len, '\0');
  if (!read_exact(body.data(), len, deadline)) return std::nullopt;
  return decode_response(body, Limits{});
}

bool RawClient::closed_by_peer(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  char buf[4096];
  while (Clock::now() < deadline) {
    pollfd p{fd_, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (::poll(&p, 1, static_cast<int>(std::max<long>(left, 1))) <= 0) continue;
    const auto r = ::recv(fd_, buf, sizeof buf, 0);
    if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) return true;
    // Bytes before the close (an error reply) are skipped.
  }
  return false;
}

Status RawClient::handshake(const std::string& token) {
  send_preamble();
  auto resp = call(make_request(Op::kHello, {}, {token}, kProtocolVersion));
  return resp.status;
}

Response RawClient::call(Request req, std::chrono::milliseconds timeout) {
  if (req.id == 0) req.id = ++next_id_;
  send(req);
  const auto deadline = Clock::now() + timeout;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    auto resp = recv(std::max(left, std::chrono::milliseconds(1)));
    if (!resp) throw std::runtime_error(std::string("no response to ") + op_name(req.op));
    if (resp->id == req.id) return *resp;
  }
}

Request make_request(Op op, std::vector<std::string> keys, std::vector<std::string> values, std::int64_t a,
                     std::int64_t b, std::uint32_t id) {
  return {.op = op, .id = id, .a = a, .b = b, .keys = std::move(keys), .values = std::move(values)};
}

}  // namespace ddp::test
