// One client of a TorchStoreProxy: the torch client's socket ("down"), its own
// connection to the job's store ("up"), and the translation between them. A
// client whose first byte starts the native protocol is relayed byte for byte.
//
// Lives on the proxy's loop thread only. Each direction alternates one read
// and one write, so a side that stops reading holds up only its own
// connection and no buffer grows past one read's worth of requests (plus the
// largest frame the limits allow).
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ddp/store/torch_proxy.hpp"
#include "proxy_namespace.hpp"
#include "torch_session_codec.hpp"

namespace ddp::store::server {

struct ProxyCounters {
  std::atomic<std::int64_t> accepted{0};
  std::atomic<std::int64_t> requests{0};
  std::atomic<std::int64_t> failed_connects{0};
};

class ProxyConnection : public std::enable_shared_from_this<ProxyConnection> {
 public:
  using OnClosed = std::function<void(ProxyConnection*)>;

  ProxyConnection(boost::asio::io_context& io, boost::asio::ip::tcp::socket down,
                  std::shared_ptr<const TorchProxyTarget> target, std::string key_prefix,
                  const TorchProxyOptions& options, ProxyCounters& counters, OnClosed on_closed);

  // Connects to the store (retrying until options.connect_timeout), then
  // starts relaying.
  void start();
  // Closes both sockets; idempotent. The torch client sees its connection end,
  // as when torch's own server goes away.
  void close(const std::string& why);
  const std::shared_ptr<const TorchProxyTarget>& target() const { return target_; }
  // True when the client has closed or shut down its side, even if the loop
  // has not read the end yet (a client that reconnects at once is then known
  // to have let its old connection go).
  bool client_gone();

 private:
  void connect_up();
  void on_connected();
  // From the client's first byte: a TCPStore client (translated) or a native one (relayed).
  void choose_mode(char first_byte);
  void read_down();
  void on_down_read(boost::system::error_code ec, std::size_t n);
  void read_up();
  void on_up_read(boost::system::error_code ec, std::size_t n);
  // Sends `out` (a member buffer) on `to`, then clears it and calls `next`; a
  // failed write closes the connection with `what` and the error.
  void write_then(boost::asio::ip::tcp::socket& to, std::string& out, const char* what,
                  void (ProxyConnection::*next)());
  // Runs the work of one of this connection's handlers: an exception it lets
  // out (a bug) closes this client and never reaches the proxy's loop.
  template <typename F>
  void guarded(F&& work);
  // Decodes the complete frames in up_in_ into down_out_; false after close().
  bool drain_up_frames();

  boost::asio::ip::tcp::socket down_;
  boost::asio::ip::tcp::socket up_;
  boost::asio::ip::tcp::resolver resolver_;
  boost::asio::steady_timer retry_;
  std::shared_ptr<const TorchProxyTarget> target_;
  const TorchProxyOptions& options_;
  ProxyCounters& counters_;
  OnClosed on_closed_;
  TorchCodec codec_;
  ProxyNamespace ns_;
  std::string peer_;
  std::chrono::steady_clock::time_point connect_deadline_;
  std::chrono::milliseconds backoff_{10};
  std::string down_in_;   // read buffer
  std::string up_out_;    // encoded requests being written to the store
  std::string up_in_;     // bytes from the store, until a whole frame is there
  std::string up_read_;   // read buffer
  std::string down_out_;  // torch replies being written to the client
  bool mode_chosen_ = false;
  bool relay_ = false;
  bool hello_answered_ = false;
  bool closed_ = false;
};

}  // namespace ddp::store::server
