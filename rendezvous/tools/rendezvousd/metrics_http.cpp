#include "metrics_http.hpp"

#include <atomic>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <map>
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

// Probes and scrapers send their request as soon as they connect: one that
// has not within this time is idle, and its descriptor is better used by the
// next probe.
constexpr std::chrono::seconds kRequestTimeout{2};
// Writing the reply: /metrics can be a few hundred KB on a busy daemon.
constexpr std::chrono::seconds kResponseTimeout{5};
// GET requests have no body; anything bigger is not a scraper.
constexpr std::uint32_t kMaxRequestBytes = 16 * 1024;
// After accept() fails (EMFILE, ...) wait before retrying instead of spinning.
constexpr std::chrono::milliseconds kAcceptRetry{100};

class Connection;

// The open connections, oldest first (metrics thread only).
struct Registry {
  std::map<std::uint64_t, std::weak_ptr<Connection>> open;
  std::uint64_t next = 0;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, const MetricsSources& sources, Registry& registry)
      : stream_(std::move(socket)), sources_(sources), registry_(registry), seq_(registry.next++) {}
  ~Connection() { registry_.open.erase(seq_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void start() {
    registry_.open.emplace(seq_, weak_from_this());
    parser_.emplace();
    parser_->header_limit(kMaxRequestBytes);
    parser_->body_limit(kMaxRequestBytes);
    stream_.expires_after(kRequestTimeout);
    http::async_read(
        stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
          if (ec) return;
          self->responding_ = true;
          try {
            self->respond();
          } catch (const std::exception& e) {
            // A bug answering this one request: it loses its connection, nothing more.
            ddp::log::get("store.server")->error("metrics request failed error=\"{}\"", e.what());
          }
        });
  }

  // No complete request yet.
  bool idle() const { return !responding_; }
  // Frees the descriptor now; the pending read then ends with an error.
  void close() {
    registry_.open.erase(seq_);
    stream_.close();
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
        body = render_prometheus(sources_.metrics());
      } catch (const std::exception& e) {
        return reply(http::status::service_unavailable, "text/plain", std::string(e.what()) + "\n");
      }
      reply(http::status::ok, "text/plain; version=0.0.4; charset=utf-8", std::move(body));
    } else if (path == "/healthz") {
      probe(sources_.health);
    } else if (path == "/readyz") {
      probe(sources_.ready);
    } else {
      reply(http::status::not_found, "text/plain", "try /metrics, /healthz or /readyz\n");
    }
  }

  void probe(const HealthSource& source) {
    std::string body = "ok\n";
    try {
      if (source) body = source();
    } catch (const std::exception& e) {
      return reply(http::status::service_unavailable, "text/plain", std::string(e.what()) + "\n");
    }
    reply(http::status::ok, "text/plain", std::move(body));
  }

  void reply(http::status status, const char* type, std::string body) {
    response_.result(status);
    response_.set(http::field::content_type, type);
    response_.set(http::field::server, "ddp-rendezvousd");
    response_.body() = std::move(body);
    response_.prepare_payload();
    stream_.expires_after(kResponseTimeout);
    http::async_write(stream_, response_, [self = shared_from_this()](beast::error_code, std::size_t) {
      beast::error_code ignored;
      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    });
  }

  beast::tcp_stream stream_;
  const MetricsSources& sources_;
  Registry& registry_;
  const std::uint64_t seq_;
  bool responding_ = false;
  beast::flat_buffer buffer_{kMaxRequestBytes};
  std::optional<http::request_parser<http::empty_body>> parser_;
  http::response<http::string_body> response_;
};

}  // namespace

class MetricsHttp::Impl {
 public:
  Impl(std::string host, std::uint16_t port, MetricsSources sources)
      : host_(std::move(host)),
        requested_port_(port),
        sources_(std::move(sources)),
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
        ->info("metrics listening host={} port={} paths=/metrics,/healthz,/readyz", host_, port_.load());
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
    ddp::log::run_surviving([this] { io_.run(); }, "store.server", "metrics");
  }

  void accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (!acceptor_.is_open()) return;
      if (ec) return accept_failed(ec);
      accept_failures_ = 0;
      // Whatever starting this one does, the next accept is armed.
      try {
        store::server::failpoints::maybe_throw("metrics.accept");
        admit(std::move(socket));
      } catch (const std::exception& e) {
        ddp::log::get("store.server")
            ->error("accepting a metrics connection failed; accepting goes on error=\"{}\"", e.what());
      }
      accept();
    });
  }

  // At most kMaxConnections at once, so that HTTP clients never hold the
  // descriptors store clients need; the oldest idle one makes room for a new
  // one (a probe connects and asks at once), and when none is idle the new
  // one is closed.
  void admit(tcp::socket socket) {
    if (registry_.open.size() >= MetricsHttp::kMaxConnections && !close_oldest_idle()) {
      beast::error_code ignored;
      socket.close(ignored);
      return;
    }
    std::make_shared<Connection>(std::move(socket), sources_, registry_)->start();
  }

  bool close_oldest_idle() {
    for (auto& [seq, weak] : registry_.open) {
      if (auto c = weak.lock(); c && c->idle()) {
        c->close();
        return true;
      }
    }
    return false;
  }

  void accept_failed(beast::error_code ec) {
    if (accept_failures_++ == 0)
      ddp::log::get("store.server")
          ->warn("metrics: accept failed error=\"{}\"; retrying every {} ms", ec.message(),
                 kAcceptRetry.count());
    // Out of descriptors: an idle connection of ours gives its own up.
    if (ec == asio::error::no_descriptors && close_oldest_idle()) return accept();
    retry_.expires_after(kAcceptRetry);
    retry_.async_wait([this](beast::error_code wec) {
      if (!wec) accept();
    });
  }

  std::string host_;
  std::uint16_t requested_port_;
  MetricsSources sources_;
  // Before io_: connections still owned by handlers leave it as io_ goes.
  Registry registry_;
  std::uint64_t accept_failures_ = 0;
  asio::io_context io_{1};
  tcp::acceptor acceptor_;
  asio::steady_timer retry_;
  std::atomic<std::uint16_t> port_{0};
  std::thread thread_;
};

MetricsHttp::MetricsHttp(std::string host, std::uint16_t port, MetricsSources sources)
    : impl_(std::make_unique<Impl>(std::move(host), port, std::move(sources))) {}
MetricsHttp::~MetricsHttp() = default;
void MetricsHttp::start() { impl_->start(); }
void MetricsHttp::stop() { impl_->stop(); }
std::uint16_t MetricsHttp::port() const { return impl_->port(); }

}  // namespace ddp::rendezvousd
