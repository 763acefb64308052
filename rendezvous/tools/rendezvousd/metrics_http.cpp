#include "metrics_http.hpp"

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <optional>
#include <thread>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "failpoints.hpp"

namespace ddp::rendezvousd {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

namespace {

// A scraper that has not sent its request (or read the reply) by then is dropped.
constexpr std::chrono::seconds kIoTimeout{10};
// GET requests have no body; anything bigger is not a scraper.
constexpr std::uint32_t kMaxRequestBytes = 16 * 1024;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, const MetricsSource& source, const HealthSource& health)
      : stream_(std::move(socket)), source_(source), health_(health) {}

  void start() {
    parser_.emplace();
    parser_->header_limit(kMaxRequestBytes);
    parser_->body_limit(kMaxRequestBytes);
    stream_.expires_after(kIoTimeout);
    http::async_read(
        stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
          if (ec) return;
          try {
            self->respond();
          } catch (const std::exception& e) {
            // A bug answering this one request: it loses its connection, nothing more.
            ddp::log::get("store.server")->error("metrics request failed error=\"{}\"", e.what());
          }
        });
  }

 private:
  void respond() {
    const auto& req = parser_->get();
    response_.version(req.version());
    response_.keep_alive(false);
    const std::string target(req.target());
    const auto path = target.substr(0, target.find('?'));
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      reply(http::status::method_not_allowed, "text/plain", "only GET\n");
    } else if (path == "/metrics") {
      std::string body;
      try {
        body = render_prometheus(source_());
      } catch (const std::exception& e) {
        return reply(http::status::service_unavailable, "text/plain", std::string(e.what()) + "\n");
      }
      reply(http::status::ok, "text/plain; version=0.0.4; charset=utf-8", std::move(body));
    } else if (path == "/healthz") {
      std::string body = "ok\n";
      try {
        if (health_) body = health_();
      } catch (const std::exception& e) {
        return reply(http::status::service_unavailable, "text/plain", std::string(e.what()) + "\n");
      }
      reply(http::status::ok, "text/plain", std::move(body));
    } else {
      reply(http::status::not_found, "text/plain", "try /metrics or /healthz\n");
    }
  }

  void reply(http::status status, const char* type, std::string body) {
    response_.result(status);
    response_.set(http::field::content_type, type);
    response_.set(http::field::server, "ddp-rendezvousd");
    response_.body() = std::move(body);
    response_.prepare_payload();
    http::async_write(stream_, response_, [self = shared_from_this()](beast::error_code, std::size_t) {
      beast::error_code ignored;
      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    });
  }

  beast::tcp_stream stream_;
  const MetricsSource& source_;
  const HealthSource& health_;
  beast::flat_buffer buffer_{kMaxRequestBytes};
  std::optional<http::request_parser<http::empty_body>> parser_;
  http::response<http::string_body> response_;
};

}  // namespace

class MetricsHttp::Impl {
 public:
  Impl(std::string host, std::uint16_t port, MetricsSource source, HealthSource health)
      : host_(std::move(host)),
        requested_port_(port),
        source_(std::move(source)),
        health_(std::move(health)),
        acceptor_(io_),
        retry_(io_) {}
  ~Impl() { stop(); }

  void start() {
    beast::error_code ec;
    const auto address = asio::ip::make_address(host_, ec);
    const auto where = host_ + ":" + std::to_string(requested_port_);
    if (ec) throw NetworkError("metrics: cannot use host '" + host_ + "': " + ec.message());
    const tcp::endpoint ep(address, requested_port_);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw NetworkError("cannot listen on " + where + " (--metrics-port): " + ec.message());
    port_ = acceptor_.local_endpoint().port();
    accept();
    thread_ = std::thread([this] { run(); });
    ddp::log::get("store.server")
        ->info("metrics listening host={} port={} paths=/metrics,/healthz", host_, port_.load());
  }

  void stop() {
    if (!thread_.joinable()) return;
    asio::post(io_, [this] {
      beast::error_code ec;
      acceptor_.close(ec);
      retry_.cancel();
      io_.stop();
    });
    thread_.join();
  }

  std::uint16_t port() const { return port_.load(); }

 private:
  // An exception escaping a handler is a bug; it must neither end this thread
  // (std::terminate would take the store down with it) nor stop the probes.
  void run() {
    while (true) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        ddp::log::get("store.server")
            ->error("metrics loop handler failed; loop goes on error=\"{}\"", e.what());
      } catch (...) {
        ddp::log::get("store.server")->error("metrics loop handler failed; loop goes on");
      }
    }
  }

  void accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (!acceptor_.is_open()) return;
      if (!ec) {
        // Whatever starting this one does, the next accept is armed.
        try {
          store::server::failpoints::maybe_throw("metrics.accept");
          std::make_shared<Connection>(std::move(socket), source_, health_)->start();
        } catch (const std::exception& e) {
          ddp::log::get("store.server")
              ->error("accepting a metrics connection failed; accepting goes on error=\"{}\"", e.what());
        }
        return accept();
      }
      // EMFILE and friends: back off instead of spinning on the metrics thread.
      retry_.expires_after(std::chrono::milliseconds(100));
      retry_.async_wait([this](beast::error_code wec) {
        if (!wec) accept();
      });
    });
  }

  std::string host_;
  std::uint16_t requested_port_;
  MetricsSource source_;
  HealthSource health_;
  asio::io_context io_{1};
  tcp::acceptor acceptor_;
  asio::steady_timer retry_;
  std::atomic<std::uint16_t> port_{0};
  std::thread thread_;
};

MetricsHttp::MetricsHttp(std::string host, std::uint16_t port, MetricsSource source, HealthSource health)
    : impl_(std::make_unique<Impl>(std::move(host), port, std::move(source), std::move(health))) {}
MetricsHttp::~MetricsHttp() = default;
void MetricsHttp::start() { impl_->start(); }
void MetricsHttp::stop() { impl_->stop(); }
std::uint16_t MetricsHttp::port() const { return impl_->port(); }

}  // namespace ddp::rendezvousd
