// One HTTP/1.1 connection's work, behind HttpConnection: a plain one
// (http_connection.cpp) or a TLS one, which lives in the plugin
// libddp_etcd_tls.so (etcd_tls.cpp) so that ddprun loads OpenSSL only for an
// https etcd. No Beast, Asio or OpenSSL here; beast_session.hpp implements it.
#pragma once

#include <memory>
#include <string>

#include "ddp/common/deadline.hpp"
#include "ddp/common/endpoint.hpp"
#include "ddp/store/etcd_store.hpp"

namespace ddp::store::etcd {

struct HttpReply {
  int status = 0;
  std::string body;
};

// HttpConnection's calls, with the same contracts (http_connection.hpp).
class HttpSession {
 public:
  virtual ~HttpSession() = default;
  virtual void connect(Deadline deadline) = 0;
  virtual HttpReply post(const std::string& target, const std::string& body, Deadline deadline) = 0;
  virtual int open_stream(const std::string& target, const std::string& body, Deadline deadline) = 0;
  virtual std::string read_line() = 0;
  virtual void interrupt() = 0;
  virtual bool is_open() const = 0;
};

// The OpenSSL client context of a store's connections (made by the plugin).
class TlsContext {
 public:
  virtual ~TlsContext() = default;
};

// What libddp_etcd_tls.so exports: kEtcdTlsSymbol, a function returning this.
struct EtcdTlsPlugin {
  // From EtcdStoreOptions' files; throws ConfigError naming an unreadable file.
  std::shared_ptr<TlsContext> (*create_context)(const EtcdStoreOptions& options);
  // One that checks no certificate: for speaks_tls's probe.
  std::shared_ptr<TlsContext> (*probe_context)();
  std::unique_ptr<HttpSession> (*make_session)(const Endpoint& endpoint, std::shared_ptr<TlsContext> tls);
};
inline constexpr const char* kEtcdTlsPluginFile = "libddp_etcd_tls.so";
inline constexpr const char* kEtcdTlsSymbol = "ddp_etcd_tls_v1";
using EtcdTlsPluginFn = const EtcdTlsPlugin*();

}  // namespace ddp::store::etcd
