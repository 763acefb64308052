// One HTTP/1.1 connection (plain or TLS) to one etcd member: blocking calls
// with a deadline. The work is an HttpSession's (http_session.hpp): Beast and
// Asio stay in http_connection.cpp and beast_session.hpp, OpenSSL in the
// plugin libddp_etcd_tls.so (etcd_tls.cpp), loaded for the first https store.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "ddp/common/deadline.hpp"
#include "ddp/common/endpoint.hpp"
#include "ddp/store/etcd_store.hpp"
#include "http_session.hpp"

namespace ddp::store::etcd {

// Why an exchange with one member failed. The client decides whether another
// member is worth trying (kUnreachable, kBroken, kTimeout) or the configuration
// is wrong (kTls).
class EndpointFailure : public std::runtime_error {
 public:
  enum class Kind { kUnreachable, kBroken, kTimeout, kTls };
  EndpointFailure(Kind k, const std::string& what, bool closed = false)
      : std::runtime_error(what), kind(k), closed_without_answer(closed) {}
  Kind kind;
  // The member accepted the connection and closed it without a byte of answer:
  // what an https-only etcd does to a plain http request.
  bool closed_without_answer;
};

// True when `endpoint` completes a TLS handshake (certificate not checked):
// tells "etcd serves https" apart from a member that died mid-request.
bool speaks_tls(const Endpoint& endpoint, Deadline deadline);

// The OpenSSL client context built from EtcdStoreOptions' files, shared by all
// connections of a store. Loads the TLS plugin; throws ConfigError naming an
// unreadable file, or the plugin (or OpenSSL) when it cannot be loaded.
std::shared_ptr<TlsContext> create_tls_context(const EtcdStoreOptions& options);

// Not thread-safe, except interrupt(). Owned by one thread at a time: the
// client's pool hands a connection to one request, a watch owns its own.
class HttpConnection {
 public:
  HttpConnection(Endpoint endpoint, std::shared_ptr<TlsContext> tls);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Resolves, connects and (with TLS) handshakes. Throws EndpointFailure.
  void connect(Deadline deadline);
  // One request/response exchange. Throws EndpointFailure.
  HttpReply post(const std::string& target, const std::string& body, Deadline deadline);
  // Sends a request whose answer is a long-lived chunked stream and reads the
  // status line and headers; returns the status. Throws EndpointFailure.
  int open_stream(const std::string& target, const std::string& body, Deadline deadline);
  // The next newline-terminated line of the stream's body; waits without a
  // deadline. Throws EndpointFailure(kBroken) when the stream ends or breaks.
  std::string read_line();
  // Thread-safe: makes a blocked (or the next) call fail with kBroken. The
  // caller keeps the connection alive until that call has returned.
  void interrupt();

  bool is_open() const { return impl_->is_open(); }
  const Endpoint& endpoint() const { return endpoint_; }
  std::string where() const { return endpoint_.to_string(); }

 private:
  Endpoint endpoint_;
  std::unique_ptr<HttpSession> impl_;
};

}  // namespace ddp::store::etcd
