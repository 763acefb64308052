#include "metrics_http.hpp"

#include <atomic>
#include <boost/archive/iterators/binary_from_base64.hpp>
#include <boost/archive/iterators/transform_width.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
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

// What the page and /metrics answer, computed on the render thread.
struct Answer {
  http::status status = http::status::ok;
  std::string type;
  std::string body;
  bool page = false;  // the page's headers (no caching, no scripts)
};

std::optional<std::string> base64_decode(std::string_view in) {
  namespace it = boost::archive::iterators;
  std::string s(in);
  std::size_t pad = 0;
  while (!s.empty() && s.back() == '=') {
    s.pop_back();
    ++pad;
  }
  if (pad > 2) return std::nullopt;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '+' && c != '/') return std::nullopt;
  }
  using Decode = it::transform_width<it::binary_from_base64<std::string::const_iterator>, 8, 6>;
  try {
    return std::string(Decode(s.cbegin()), Decode(s.cend()));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool same(std::string_view a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < b.size(); ++i) {
    diff |= static_cast<unsigned char>((i < a.size() ? a[i] : 0) ^ b[i]);
  }
  return diff == 0;
}

// The open connections, oldest first (metrics thread only).
struct Registry {
  std::map<std::uint64_t, std::weak_ptr<Connection>> open;
  std::uint64_t next = 0;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, const MetricsSources& sources, Registry& registry, asio::io_context& render)
      : stream_(std::move(socket)),
        sources_(sources),
        registry_(registry),
        render_(render),
        seq_(registry.next++) {}
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
      offload([this] {
        auto body = render_prometheus(sources_.metrics());
        if (sources_.job_metrics) body += sources_.job_metrics();
        return Answer{http::status::ok, "text/plain; version=0.0.4; charset=utf-8", std::move(body)};
      });
    } else if ((path == "/" || path == "/job" || path == "/api/jobs") && sources_.page) {
      if (!sources_.token.empty() && !authorized(req[http::field::authorization], sources_.token)) {
        response_.set(http::field::www_authenticate, "Basic realm=\"ddp-rendezvousd\", charset=\"UTF-8\"");
        return reply(
            http::status::unauthorized, "text/plain",
            "401: this daemon wants its token: send \"Authorization: Bearer TOKEN\", or give the token "
            "as the password when the browser asks\n");
      }
      const auto query =
          target.find('?') == std::string::npos ? std::string() : target.substr(target.find('?') + 1);
      offload([this, path, query] {
        auto r = sources_.page(path, query);
        return Answer{static_cast<http::status>(r.status), std::move(r.content_type), std::move(r.body),
                      true};
      });
    } else if (path == "/healthz") {
      probe(sources_.health);
    } else if (path == "/readyz") {
      probe(sources_.ready);
    } else {
      reply(http::status::not_found, "text/plain", "try /, /metrics, /healthz or /readyz\n");
    }
  }

  // Runs `work` on the render thread, then writes its answer from this
  // connection's own thread; a failure is a 503 with its message.
  template <typename Work>
  void offload(Work work) {
    asio::post(render_, [self = shared_from_this(), work = std::move(work)]() mutable {
      Answer a;
      try {
        a = work();
      } catch (const std::exception& e) {
        a = Answer{http::status::service_unavailable, "text/plain", std::string(e.what()) + "\n"};
      }
      asio::post(self->stream_.get_executor(), [self, a = std::move(a)]() mutable {
        if (a.page) {
          // Read-only, nothing to fetch, nothing to run: a value that slipped
          // past the escaping still could not load or execute anything.
          self->response_.set(http::field::cache_control, "no-store");
          self->response_.set("Content-Security-Policy",
                              "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; "
                              "form-action 'none'; frame-ancestors 'none'");
          self->response_.set("X-Content-Type-Options", "nosniff");
          self->response_.set("Referrer-Policy", "no-referrer");
        }
        self->reply(a.status, a.type.c_str(), std::move(a.body));
      });
    });
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
  asio::io_context& render_;
  const std::uint64_t seq_;
  bool responding_ = false;
  beast::flat_buffer buffer_{kMaxRequestBytes};
  std::optional<http::request_parser<http::empty_body>> parser_;
  http::response<http::string_body> response_;
};

}  // namespace

bool authorized(std::string_view header, const std::string& token) {
  const auto sp = header.find(' ');
  if (sp == std::string_view::npos) return false;
  const auto scheme = header.substr(0, sp);
  auto value = header.substr(sp + 1);
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
  if (beast::iequals(scheme, "Bearer")) return same(value, token);
  if (!beast::iequals(scheme, "Basic")) return false;
  const auto decoded = base64_decode(value);
  if (!decoded) return false;
  const auto colon = decoded->find(':');
  return colon != std::string::npos && same(std::string_view(*decoded).substr(colon + 1), token);
}

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
    render_thread_ = std::thread(
        [this] { ddp::log::run_surviving([this] { render_io_.run(); }, "store.server", "metrics render"); });
    ddp::log::get("store.server")
        ->info(
            "metrics listening host={} port={} paths=/,/job,/api/jobs,/metrics,/healthz,/readyz page_auth={}",
            host_, port_.load(), sources_.token.empty() ? "off" : "token");
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
    render_work_.reset();
    render_io_.stop();
    render_thread_.join();
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
    std::make_shared<Connection>(std::move(socket), sources_, registry_, render_io_)->start();
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
  // After io_: destroyed first, with the connections its queued work holds.
  asio::io_context render_io_{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> render_work_{
      render_io_.get_executor()};
  std::thread render_thread_;
};

MetricsHttp::MetricsHttp(std::string host, std::uint16_t port, MetricsSources sources)
    : impl_(std::make_unique<Impl>(std::move(host), port, std::move(sources))) {}
MetricsHttp::~MetricsHttp() = default;
void MetricsHttp::start() { impl_->start(); }
void MetricsHttp::stop() { impl_->stop(); }
std::uint16_t MetricsHttp::port() const { return impl_->port(); }

}  // namespace ddp::rendezvousd
