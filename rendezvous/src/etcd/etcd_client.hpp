// Unary calls to etcd's JSON gateway with failover across the configured
// members: the piece every EtcdStore method and watch goes through.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ddp/store/etcd_store.hpp"
#include "http_connection.hpp"

namespace ddp::store::etcd {

// Thread-safe. Keeps a few idle keep-alive connections per member.
class EtcdClient {
 public:
  explicit EtcdClient(EtcdStoreOptions options);

  // POSTs `body` to `path` ("/v3/kv/range") and returns etcd's answer. Starts at
  // the member that answered last; on an unreachable member, a broken or timed
  // out exchange or an HTTP 5xx moves to the next, backing off after each full
  // cycle until options.connect_timeout. `what` ("put of key 'k'") names the
  // operation in a StoreError when etcd rejects it.
  nlohmann::json call(const std::string& path, const nlohmann::json& body, const std::string& what);

  // For watches, which own their connection: a connected connection to member
  // `index`. Throws EndpointFailure, or ConfigError on a TLS mismatch.
  std::unique_ptr<HttpConnection> connect(std::size_t index) const;
  // Interprets a non-200 answer of member `index` to `path`: throws ConfigError
  // (not etcd, TLS mismatch) or StoreError (etcd rejected it), or returns the
  // reason when another member may do better (5xx).
  std::string check_reply(std::size_t index, const std::string& path, const HttpReply& reply,
                          const std::string& what) const;
  // Parses a 200 answer; ConfigError when it is not JSON (not an etcd gateway),
  // ProtocolError when it breaks json_input::kEtcdReply's size or depth.
  nlohmann::json parse_body(std::size_t index, const std::string& path, const std::string& body) const;
  // Throws ConfigError when `failure` of plain http member `index` is because
  // the member serves https; returns otherwise.
  void diagnose(std::size_t index, const EndpointFailure& failure) const;
  // The NetworkError after every member failed; `failures` holds one reason per member.
  [[noreturn]] void throw_unreachable(const std::vector<std::string>& failures) const;
  // The failures of one round over the endpoints, "; "-separated.
  static std::string joined(const std::vector<std::string>& failures);

  std::size_t endpoint_count() const { return options_.endpoints.size(); }
  std::size_t preferred() const { return preferred_.load(); }
  void set_preferred(std::size_t index) { preferred_.store(index); }
  const EtcdStoreOptions& options() const { return options_; }

 private:
  struct Attempt;
  Attempt try_member(std::size_t index, const std::string& path, const std::string& text,
                     const std::string& what);
  std::unique_ptr<HttpConnection> checkout(std::size_t index);
  void checkin(std::size_t index, std::unique_ptr<HttpConnection> conn);

  EtcdStoreOptions options_;
  std::shared_ptr<TlsContext> tls_;
  std::atomic<std::size_t> preferred_{0};
  std::mutex pool_mu_;
  std::vector<std::vector<std::unique_ptr<HttpConnection>>> idle_;  // by member index
};

}  // namespace ddp::store::etcd
