// The https half of the etcd client, built as the plugin libddp_etcd_tls.so
// (http_session.hpp's EtcdTlsPlugin): the OpenSSL context from the store's
// files, and sessions over TLS streams. Linked into ddprun, OpenSSL cost every
// launch ~1.3 ms of start-up (docs/data/performance-history.md, "Launch floor").
#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>
#include <filesystem>
#include <functional>

#include "beast_session.hpp"
#include "ddp/common/error.hpp"

namespace ddp::store::etcd {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace ssl = asio::ssl;
using boost::system::error_code;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

struct OpenSslContext final : TlsContext {
  ssl::context ctx{ssl::context::tls_client};
};

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

std::shared_ptr<TlsContext> create_context(const EtcdStoreOptions& o) {
  auto tls = std::make_shared<OpenSslContext>();
  auto& ctx = tls->ctx;
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

std::shared_ptr<TlsContext> probe_context() {
  auto tls = std::make_shared<OpenSslContext>();
  tls->ctx.set_verify_mode(ssl::verify_none);
  return tls;
}

void handshake(TlsStream& s, const Endpoint& endpoint, asio::io_context& ioc) {
  error_code addr_ec;
  asio::ip::make_address(endpoint.host, addr_ec);
  // SNI is for names only; an address is matched against the certificate's IP SANs.
  if (addr_ec) SSL_set_tlsext_host_name(s.native_handle(), endpoint.host.c_str());
  s.set_verify_callback(ssl::host_name_verification(endpoint.host));
  error_code ec = asio::error::would_block;
  s.async_handshake(ssl::stream_base::client, [&](error_code e) { ec = e; });
  ioc.restart();
  ioc.run();
  if (ec) {
    const std::string why = ec == beast::error::timeout ? "no answer" : ec.message();
    throw EndpointFailure(
        EndpointFailure::Kind::kTls,
        "TLS handshake with etcd at " + endpoint.to_string() + " failed: " + why +
            " (does the endpoint serve https, and do etcd_cacert/etcd_cert/etcd_key match it?)");
  }
}

std::unique_ptr<HttpSession> make_session(const Endpoint& endpoint, std::shared_ptr<TlsContext> tls) {
  auto context = std::static_pointer_cast<OpenSslContext>(std::move(tls));
  return std::make_unique<BeastSession<TlsStream>>(
      endpoint,
      [context](asio::io_context& ioc, std::optional<TlsStream>& s) { s.emplace(ioc, context->ctx); },
      handshake);
}

const EtcdTlsPlugin kPlugin{create_context, probe_context, make_session};

}  // namespace

}  // namespace ddp::store::etcd

extern "C" const ddp::store::etcd::EtcdTlsPlugin* ddp_etcd_tls_v1() { return &ddp::store::etcd::kPlugin; }
