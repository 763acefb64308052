#include "http_connection.hpp"

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <filesystem>
#include <functional>
#include <optional>

#include "ddp/common/error.hpp"
#include "ddp/common/json_input.hpp"

namespace ddp::store::etcd {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// Answers of etcd's gateway are small except a large list(); this bounds what a
// misbehaving server can make us allocate, for an answer and for one watch
// message alike (the JSON read from them has the same bound).
constexpr std::uint64_t kMaxReplyBytes = json_input::kEtcdReply.max_bytes;

struct TlsContext::Impl {
  ssl::context ctx{ssl::context::tls_client};
};

TlsContext::~TlsContext() = default;

namespace {

void load_file(const std::string& path, const char* what, const std::function<void()>& load) {
  std::error_code fec;
  if (!std::filesystem::is_regular_file(path, fec))
    throw ConfigError(std::string("etcd TLS ") + what + " '" + path + "' is not a readable file");
  try {
    load();
  } catch (const boost::system::system_error& e) {
    throw ConfigError(std::string("etcd TLS ") + what + " '" + path + "' could not be loaded: " + e.what());
  }
}

}  // namespace

std::shared_ptr<TlsContext> TlsContext::create(const EtcdStoreOptions& o) {
  auto tls = std::make_shared<TlsContext>();
  tls->impl = std::make_unique<Impl>();
  auto& ctx = tls->impl->ctx;
  if (o.cert_file.empty() != o.key_file.empty())
    throw ConfigError(
        "etcd TLS needs both a client certificate and its key (etcd_cert and etcd_key), got only " +
        std::string(o.cert_file.empty() ? "the key" : "the certificate"));
  if (!o.ca_file.empty()) {
    load_file(o.ca_file, "CA file (etcd_cacert)", [&] { ctx.load_verify_file(o.ca_file); });
  } else {
    ctx.set_default_verify_paths();
  }
  ctx.set_verify_mode(ssl::verify_peer);
  if (!o.cert_file.empty()) {
    load_file(o.cert_file, "certificate (etcd_cert)", [&] { ctx.use_certificate_chain_file(o.cert_file); });
    load_file(o.key_file, "key (etcd_key)", [&] { ctx.use_private_key_file(o.key_file, ssl::context::pem); });
  }
  return tls;
}

struct HttpConnection::Impl {
  asio::io_context ioc;
  std::shared_ptr<TlsContext> tls;
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
  beast::flat_buffer buffer;
  std::optional<http::response_parser<http::empty_body>> stream;
  std::function<std::size_t(std::uint64_t, boost::string_view, error_code&)> on_chunk;
  std::string pending;  // streamed body bytes not yet handed out as lines
  std::atomic<bool> interrupted{false};
  bool open = false;

  beast::tcp_stream& lowest() { return secure ? beast::get_lowest_layer(*secure) : *plain; }
  template <class F>
  void with_stream(F&& f) {
    if (secure)
      f(*secure);
    else
      f(*plain);
  }
  // Runs the io_context until the operations just started have completed.
  void run() {
    ioc.restart();
    ioc.run();
  }
  void close() {
    if (plain || secure) lowest().close();
    open = false;
  }
};

HttpConnection::HttpConnection(Endpoint endpoint, std::shared_ptr<TlsContext> tls)
    : endpoint_(std::move(endpoint)), impl_(std::make_unique<Impl>()) {
  impl_->tls = std::move(tls);
  impl_->on_chunk = [this](std::uint64_t, boost::string_view data, error_code&) {
    impl_->pending.append(data.data(), data.size());
    return data.size();
  };
}

HttpConnection::~HttpConnection() = default;

bool HttpConnection::is_open() const { return impl_->open; }

void HttpConnection::interrupt() {
  impl_->interrupted = true;
  asio::post(impl_->ioc, [s = impl_.get()] { s->close(); });
}

namespace {
[[noreturn]] void fail(HttpConnection::Impl& s, const std::string& where, const error_code& ec,
                       const char* doing, bool no_answer_yet = false) {
  s.close();
  if (ec == beast::error::timeout)
    throw EndpointFailure(EndpointFailure::Kind::kTimeout, "etcd at " + where + " timed out " + doing);
  throw EndpointFailure(EndpointFailure::Kind::kBroken,
                        "etcd at " + where + " unreachable: " + ec.message() + " (" + doing + ")",
                        no_answer_yet && ec == http::error::end_of_stream);
}
}  // namespace

void HttpConnection::connect(Deadline deadline) {
  auto& s = *impl_;
  const auto where = this->where();
  s.close();
  s.plain.reset();
  s.secure.reset();
  s.stream.reset();
  s.buffer.clear();
  s.pending.clear();
  if (s.interrupted) throw EndpointFailure(EndpointFailure::Kind::kBroken, "interrupted");

  tcp::resolver resolver(s.ioc);
  asio::steady_timer timer(s.ioc);
  error_code ec = asio::error::would_block;
  tcp::resolver::results_type results;
  bool timed_out = false;
  timer.expires_after(deadline.remaining());
  timer.async_wait([&](error_code e) {
    if (!e) {
      timed_out = true;
      resolver.cancel();
    }
  });
  resolver.async_resolve(endpoint_.host, std::to_string(endpoint_.port),
                         [&](error_code e, tcp::resolver::results_type r) {
                           ec = e;
                           results = std::move(r);
                           timer.cancel();
                         });
  s.run();
  if (timed_out)
    throw EndpointFailure(EndpointFailure::Kind::kTimeout,
                          "etcd at " + where + " unreachable: name lookup timed out");
  if (ec)
    throw EndpointFailure(EndpointFailure::Kind::kUnreachable,
                          "etcd at " + where + " unreachable: cannot resolve host: " + ec.message());

  if (s.tls)
    s.secure.emplace(s.ioc, s.tls->impl->ctx);
  else
    s.plain.emplace(s.ioc);
  s.lowest().expires_after(deadline.remaining());
  ec = asio::error::would_block;
  s.lowest().async_connect(results, [&](error_code e, const tcp::endpoint&) { ec = e; });
  s.run();
  if (ec == beast::error::timeout)
    throw EndpointFailure(EndpointFailure::Kind::kTimeout,
                          "etcd at " + where + " unreachable: connect timed out");
  if (ec)
    throw EndpointFailure(EndpointFailure::Kind::kUnreachable,
                          "etcd at " + where + " unreachable: " + ec.message());
  error_code ignored;
  s.lowest().socket().set_option(tcp::no_delay(true), ignored);

  if (s.secure) {
    error_code addr_ec;
    asio::ip::make_address(endpoint_.host, addr_ec);
    // SNI is for names only; an address is matched against the certificate's IP SANs.
    if (addr_ec) SSL_set_tlsext_host_name(s.secure->native_handle(), endpoint_.host.c_str());
    s.secure->set_verify_callback(ssl::host_name_verification(endpoint_.host));
    ec = asio::error::would_block;
    s.secure->async_handshake(ssl::stream_base::client, [&](error_code e) { ec = e; });
    s.run();
    if (ec) {
      s.close();
      const std::string why = ec == beast::error::timeout ? "no answer" : ec.message();
      throw EndpointFailure(
          EndpointFailure::Kind::kTls,
          "TLS handshake with etcd at " + where + " failed: " + why +
              " (does the endpoint serve https, and do etcd_cacert/etcd_cert/etcd_key match it?)");
    }
  }
  s.open = true;
}

namespace {
template <class Stream>
void start_write(Stream& st, http::request<http::string_body>& req, error_code& ec) {
  http::async_write(st, req, [&ec](error_code e, std::size_t) { ec = e; });
}
}  // namespace

static void send_request(HttpConnection::Impl& s, const std::string& where, const std::string& target,
                         const std::string& body, Deadline deadline) {
  if (s.interrupted) throw EndpointFailure(EndpointFailure::Kind::kBroken, "interrupted");
  if (!s.open)
    throw EndpointFailure(EndpointFailure::Kind::kBroken, "etcd at " + where + ": connection closed");
  http::request<http::string_body> req{http::verb::post, target, 11};
  req.set(http::field::host, where);
  req.set(http::field::content_type, "application/json");
  req.keep_alive(true);
  req.body() = body;
  req.prepare_payload();
  s.lowest().expires_after(deadline.remaining());
  error_code ec = asio::error::would_block;
  s.with_stream([&](auto& st) { start_write(st, req, ec); });
  s.run();
  if (ec) fail(s, where, ec, "sending a request");
}

HttpReply HttpConnection::post(const std::string& target, const std::string& body, Deadline deadline) {
  auto& s = *impl_;
  const auto where = this->where();
  send_request(s, where, target, body, deadline);
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxReplyBytes);
  error_code ec = asio::error::would_block;
  s.with_stream(
      [&](auto& st) { http::async_read(st, s.buffer, parser, [&](error_code e, std::size_t) { ec = e; }); });
  s.run();
  if (ec) fail(s, where, ec, "waiting for an answer", true);
  auto& msg = parser.get();
  if (!msg.keep_alive()) s.close();
  return {static_cast<int>(msg.result_int()), std::move(msg.body())};
}

int HttpConnection::open_stream(const std::string& target, const std::string& body, Deadline deadline) {
  auto& s = *impl_;
  const auto where = this->where();
  send_request(s, where, target, body, deadline);
  s.pending.clear();
  s.stream.emplace();
  s.stream->body_limit(boost::none);
  s.stream->on_chunk_body(s.on_chunk);
  error_code ec = asio::error::would_block;
  s.with_stream([&](auto& st) {
    http::async_read_header(st, s.buffer, *s.stream, [&](error_code e, std::size_t) { ec = e; });
  });
  s.run();
  if (ec) fail(s, where, ec, "waiting for the watch to start", true);
  s.lowest().expires_never();
  return static_cast<int>(s.stream->get().result_int());
}

std::string HttpConnection::read_line() {
  auto& s = *impl_;
  const auto where = this->where();
  for (;;) {
    const auto nl = s.pending.find('\n');
    if (nl != std::string::npos) {
      std::string line = s.pending.substr(0, nl);
      s.pending.erase(0, nl + 1);
      return line;
    }
    if (s.pending.size() > kMaxReplyBytes)
      throw EndpointFailure(EndpointFailure::Kind::kBroken,
                            "etcd at " + where + " sent a watch message of more than " +
                                std::to_string(kMaxReplyBytes) + " bytes; at most " +
                                std::to_string(kMaxReplyBytes) + " are read");
    if (s.interrupted) throw EndpointFailure(EndpointFailure::Kind::kBroken, "interrupted");
    if (!s.stream || s.stream->is_done() || !s.open)
      throw EndpointFailure(EndpointFailure::Kind::kBroken, "etcd at " + where + " ended the watch stream");
    error_code ec = asio::error::would_block;
    s.with_stream([&](auto& st) {
      http::async_read_some(st, s.buffer, *s.stream, [&](error_code e, std::size_t) { ec = e; });
    });
    s.run();
    if (ec) fail(s, where, ec, "reading the watch stream");
  }
}

bool speaks_tls(const Endpoint& endpoint, Deadline deadline) {
  auto probe = std::make_shared<TlsContext>();
  probe->impl = std::make_unique<TlsContext::Impl>();
  probe->impl->ctx.set_verify_mode(ssl::verify_none);
  HttpConnection conn(endpoint, probe);
  try {
    conn.connect(deadline);
    return true;
  } catch (const EndpointFailure&) {
    return false;
  }
}

}  // namespace ddp::store::etcd
