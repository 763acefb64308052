// A small synchronous client of the native protocol for tests: blocking socket,
// explicit frames, and a way to send arbitrary bytes. It deliberately shares
// nothing with TcpStore so the daemon is tested against the protocol itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddp/store/protocol.hpp"

namespace ddp::test {

class RawClient {
 public:
  // Connects to 127.0.0.1:port; throws on failure. `receive_buffer_bytes` > 0
  // sets SO_RCVBUF first: a client that does not read then leaves its unread
  // replies in the server, not in the kernel's buffers.
  explicit RawClient(int port, int receive_buffer_bytes = 0);
  ~RawClient();
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  void send_bytes(const std::string& bytes);
  // shutdown(SHUT_WR): the server reads EOF, this side can still read.
  void shutdown_write();
  void send_preamble();
  void send(const store::Request& req);
  // The next response; nullopt when the server closed the connection or
  // nothing came within `timeout`.
  std::optional<store::Response> recv(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // True once the server has closed the connection (EOF or reset) within `timeout`.
  bool closed_by_peer(std::chrono::milliseconds timeout = std::chrono::seconds(10));

  // preamble + HELLO; returns the HELLO response status.
  store::Status handshake(const std::string& token = {});
  // Sends one request and returns the response carrying its id.
  store::Response call(store::Request req, std::chrono::milliseconds timeout = std::chrono::seconds(10));

 private:
  bool read_exact(char* out, std::size_t n, std::chrono::steady_clock::time_point deadline);

  int fd_ = -1;
  std::uint32_t next_id_ = 1000;
};

store::Request make_request(store::Op op, std::vector<std::string> keys = {},
                            std::vector<std::string> values = {}, std::int64_t a = 0, std::int64_t b = 0,
                            std::uint32_t id = 0);

}  // namespace ddp::test
