// HttpSession over Beast, for a plain stream (beast::tcp_stream, in
// http_connection.cpp) or a TLS one (beast::ssl_stream, in the plugin,
// etcd_tls.cpp): blocking calls with a deadline, as Asio operations on a
// private io_context the calling thread runs (Beast's timeouts only apply to
// async operations). Included by those two files only.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <functional>
#include <optional>
#include <vector>

#include "ddp/common/json_input.hpp"
#include "http_connection.hpp"
#include "resolve_endpoints.hpp"

namespace ddp::store::etcd {

// Answers of etcd's gateway are small except a large list(); this bounds what a
// misbehaving server can make us allocate, for an answer and for one watch
// message alike (the JSON read from them has the same bound).
constexpr std::uint64_t kMaxReplyBytes = json_input::kEtcdReply.max_bytes;

// `Stream` is beast::tcp_stream or an ssl_stream over one.
template <class Stream>
class BeastSession final : public HttpSession {
 public:
  using error_code = boost::system::error_code;
  // make(ioc, stream): emplaces a new unconnected stream. handshake(stream,
  // endpoint, ioc): after the TCP connect, under its deadline, running `ioc`;
  // throws EndpointFailure. None for a plain stream.
  using MakeStream = std::function<void(boost::asio::io_context&, std::optional<Stream>&)>;
  using Handshake = std::function<void(Stream&, const Endpoint&, boost::asio::io_context&)>;

  BeastSession(Endpoint endpoint, MakeStream make, Handshake handshake)
      : endpoint_(std::move(endpoint)), make_(std::move(make)), handshake_(std::move(handshake)) {
    on_chunk_ = [this](std::uint64_t, boost::string_view data, error_code&) {
      pending_.append(data.data(), data.size());
      return data.size();
    };
  }

  bool is_open() const override { return open_; }

  void interrupt() override {
    interrupted_ = true;
    boost::asio::post(ioc_, [this] { close(); });
  }

  // Runs the io_context until the operations just started have completed.
  void run() {
    ioc_.restart();
    ioc_.run();
  }
  boost::beast::tcp_stream& lowest() { return boost::beast::get_lowest_layer(*stream_); }
  void close() {
    if (stream_) lowest().close();
    open_ = false;
  }

  void connect(Deadline deadline) override {
    namespace asio = boost::asio;
    using tcp = asio::ip::tcp;
    const auto where = endpoint_.to_string();
    close();
    stream_.reset();
    parser_.reset();
    buffer_.clear();
    pending_.clear();
    if (interrupted_) throw EndpointFailure(EndpointFailure::Kind::kBroken, "interrupted");

    tcp::resolver resolver(ioc_);
    asio::steady_timer timer(ioc_);
    error_code ec = asio::error::would_block;
    std::vector<tcp::endpoint> results;
    bool timed_out = false;
    timer.expires_after(deadline.remaining());
    timer.async_wait([&](error_code e) {
      if (!e) {
        timed_out = true;
        resolver.cancel();
      }
    });
    store::resolve_endpoints(resolver, endpoint_.host, endpoint_.port,
                             [&](const error_code& e, std::vector<tcp::endpoint> r) {
                               ec = e;
                               results = std::move(r);
                               timer.cancel();
                             });
    run();
    if (timed_out)
      throw EndpointFailure(EndpointFailure::Kind::kTimeout,
                            "etcd at " + where + " unreachable: name lookup timed out");
    if (ec)
      throw EndpointFailure(EndpointFailure::Kind::kUnreachable,
                            "etcd at " + where + " unreachable: cannot resolve host: " + ec.message());

    make_(ioc_, stream_);
    lowest().expires_after(deadline.remaining());
    ec = asio::error::would_block;
    lowest().async_connect(results, [&](error_code e, const tcp::endpoint&) { ec = e; });
    run();
    if (ec == boost::beast::error::timeout)
      throw EndpointFailure(EndpointFailure::Kind::kTimeout,
                            "etcd at " + where + " unreachable: connect timed out");
    if (ec)
      throw EndpointFailure(EndpointFailure::Kind::kUnreachable,
                            "etcd at " + where + " unreachable: " + ec.message());
    error_code ignored;
    lowest().socket().set_option(tcp::no_delay(true), ignored);
    if (handshake_) {
      try {
        handshake_(*stream_, endpoint_, ioc_);
      } catch (...) {
        close();
        throw;
      }
    }
    open_ = true;
  }

  HttpReply post(const std::string& target, const std::string& body, Deadline deadline) override {
    namespace http = boost::beast::http;
    send_request(target, body, deadline);
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxReplyBytes);
    error_code ec = boost::asio::error::would_block;
    http::async_read(*stream_, buffer_, parser, [&](error_code e, std::size_t) { ec = e; });
    run();
    if (ec) fail(ec, "waiting for an answer", true);
    auto& msg = parser.get();
    if (!msg.keep_alive()) close();
    return {static_cast<int>(msg.result_int()), std::move(msg.body())};
  }

  int open_stream(const std::string& target, const std::string& body, Deadline deadline) override {
    namespace http = boost::beast::http;
    send_request(target, body, deadline);
    pending_.clear();
    parser_.emplace();
    parser_->body_limit(boost::none);
    parser_->on_chunk_body(on_chunk_);
    error_code ec = boost::asio::error::would_block;
    http::async_read_header(*stream_, buffer_, *parser_, [&](error_code e, std::size_t) { ec = e; });
    run();
    if (ec) fail(ec, "waiting for the watch to start", true);
    lowest().expires_never();
    return static_cast<int>(parser_->get().result_int());
  }

  std::string read_line() override {
    const auto where = endpoint_.to_string();
    for (;;) {
      const auto nl = pending_.find('\n');
      if (nl != std::string::npos) {
        std::string line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        return line;
      }
      if (pending_.size() > kMaxReplyBytes)
        throw EndpointFailure(EndpointFailure::Kind::kBroken,
                              "etcd at " + where + " sent a watch message of more than " +
                                  std::to_string(kMaxReplyBytes) + " bytes; at most " +
                                  std::to_string(kMaxReplyBytes) + " are read");
      if (interrupted_) throw EndpointFailure(EndpointFailure::Kind::kBroken, "interrupted");
      if (!parser_ || parser_->is_done() || !open_)
        throw EndpointFailure(EndpointFailure::Kind::kBroken, "etcd at " + where + " ended the watch stream");
      error_code ec = boost::asio::error::would_block;
      boost::beast::http::async_read_some(*stream_, buffer_, *parser_,
                                          [&](error_code e, std::size_t) { ec = e; });
      run();
      if (ec) fail(ec, "reading the watch stream");
    }
  }

 private:
  [[noreturn]] void fail(const error_code& ec, const char* doing, bool no_answer_yet = false) {
    close();
    const auto where = endpoint_.to_string();
    if (ec == boost::beast::error::timeout)
      throw EndpointFailure(EndpointFailure::Kind::kTimeout, "etcd at " + where + " timed out " + doing);
    throw EndpointFailure(EndpointFailure::Kind::kBroken,
                          "etcd at " + where + " unreachable: " + ec.message() + " (" + doing + ")",
                          no_answer_yet && ec == boost::beast::http::error::end_of_stream);
  }

  void send_request(const std::string& target, const std::string& body, Deadline deadline) {
    namespace http = boost::beast::http;
    const auto where = endpoint_.to_string();
    if (interrupted_) throw EndpointFailure(EndpointFailure::Kind::kBroken, "interrupted");
    if (!open_)
      throw EndpointFailure(EndpointFailure::Kind::kBroken, "etcd at " + where + ": connection closed");
    http::request<http::string_body> req{http::verb::post, target, 11};
    req.set(http::field::host, where);
    req.set(http::field::content_type, "application/json");
    req.keep_alive(true);
    req.body() = body;
    req.prepare_payload();
    lowest().expires_after(deadline.remaining());
    error_code ec = boost::asio::error::would_block;
    http::async_write(*stream_, req, [&ec](error_code e, std::size_t) { ec = e; });
    run();
    if (ec) fail(ec, "sending a request");
  }

  Endpoint endpoint_;
  MakeStream make_;
  Handshake handshake_;
  boost::asio::io_context ioc_;
  std::optional<Stream> stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::response_parser<boost::beast::http::empty_body>> parser_;
  std::function<std::size_t(std::uint64_t, boost::string_view, error_code&)> on_chunk_;
  std::string pending_;  // streamed body bytes not yet handed out as lines
  std::atomic<bool> interrupted_{false};
  bool open_ = false;
};

}  // namespace ddp::store::etcd
