#include "etcd_client.hpp"

#include <algorithm>
#include <optional>
#include <thread>

#include "ddp/common/deadline.hpp"
#include "ddp/common/error.hpp"
#include "ddp/common/json_input.hpp"
#include "ddp/common/logging.hpp"

namespace ddp::store::etcd {

using nlohmann::json;

namespace {

constexpr int kGrpcOutOfRange = 11;

// Idle connections kept per member: enough for the few threads of an agent;
// more would only hold sockets open on etcd.
constexpr std::size_t kMaxIdlePerMember = 8;
// Between full cycles over the members: quick first retries (a member that is
// restarting, a leader election of ~1 s), capped so a long outage is not hammered.
constexpr Millis kBackoffBase{50};
constexpr Millis kBackoffCap{1000};

// A string field of an error answer; `fallback` when absent or of another type.
std::string text_field(const json& j, const char* name, const std::string& fallback) {
  const auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}
}  // namespace

struct EtcdClient::Attempt {
  std::optional<json> answer;
  std::string failure;
};

EtcdClient::EtcdClient(EtcdStoreOptions options) : options_(std::move(options)) {
  if (options_.endpoints.empty()) throw ConfigError("etcd store needs at least one endpoint (HOST:PORT)");
  if (options_.tls()) tls_ = create_tls_context(options_);
  idle_.resize(options_.endpoints.size());
}

std::unique_ptr<HttpConnection> EtcdClient::connect(std::size_t index) const {
  auto conn = std::make_unique<HttpConnection>(options_.endpoints.at(index), tls_);
  try {
    conn->connect(Deadline::after(options_.request_timeout));
  } catch (const EndpointFailure& f) {
    if (f.kind == EndpointFailure::Kind::kTls) throw ConfigError(f.what());
    throw;
  }
  return conn;
}

std::unique_ptr<HttpConnection> EtcdClient::checkout(std::size_t index) {
  std::lock_guard lock(pool_mu_);
  auto& idle = idle_[index];
  if (idle.empty()) return nullptr;
  auto conn = std::move(idle.back());
  idle.pop_back();
  return conn;
}

void EtcdClient::checkin(std::size_t index, std::unique_ptr<HttpConnection> conn) {
  if (!conn || !conn->is_open()) return;
  std::lock_guard lock(pool_mu_);
  if (idle_[index].size() < kMaxIdlePerMember) idle_[index].push_back(std::move(conn));
}

json EtcdClient::parse_body(std::size_t index, const std::string& path, const std::string& body) const {
  const auto where = options_.endpoints[index].to_string();
  json j;
  try {
    j = parse_json(body, json_input::kEtcdReply);
  } catch (const JsonError& e) {
    if (e.kind() != JsonError::Kind::kMalformed)
      throw ProtocolError("etcd at " + where + ": its answer to " + path + " " + e.what());
  }
  if (!j.is_object())
    throw ConfigError(where + " is not an etcd v3 endpoint (the answer to " + path + " is not JSON)");
  return j;
}

std::string EtcdClient::check_reply(std::size_t index, const std::string& path, const HttpReply& reply,
                                    const std::string& what) const {
  const auto where = options_.endpoints[index].to_string();
  json j;
  std::string refused;  // why the body was not read, when it broke a bound
  try {
    j = parse_json(reply.body, json_input::kEtcdReply);
  } catch (const JsonError& e) {
    if (e.kind() != JsonError::Kind::kMalformed) refused = std::string("; its body ") + e.what();
  }
  // etcd's gateway answers errors as {"error": ..., "code": <gRPC code>, "message": ...}.
  const bool etcd_error = j.is_object() && (j.contains("code") || j.contains("error"));
  std::string message;
  if (etcd_error) message = text_field(j, "error", text_field(j, "message", ""));
  const auto status = std::to_string(reply.status);
  if (reply.status >= 500) {
    // 502-504 without etcd's JSON come from a proxy in front of a member: worth another member.
    if (etcd_error || reply.status == 502 || reply.status == 503 || reply.status == 504)
      return "etcd at " + where + " answered HTTP " + status + (message.empty() ? "" : ": " + message) +
             refused;
    throw ConfigError(where + " is not an etcd v3 endpoint (HTTP " + status + " on " + path + refused + ")");
  }
  if (reply.status == 400 && reply.body.find("HTTP request to an HTTPS server") != std::string::npos)
    throw ConfigError("etcd at " + where +
                      " serves https but no TLS option is set: give the cluster's CA file (etcd_cacert)");
  if (!etcd_error)
    throw ConfigError(where + " is not an etcd v3 endpoint (HTTP " + status + " on " + path + refused + ")");
  // ErrCompacted is gRPC OUT_OF_RANGE (11), which etcd also uses for a future
  // revision: the message tells them apart. Callers branch on the type only.
  const auto code = j.find("code");
  if (code != j.end() && *code == kGrpcOutOfRange && message.find("compacted") != std::string::npos)
    throw CompactedError("etcd at " + where + " rejected " + what + ": " + message);
  throw StoreError("etcd at " + where + " rejected " + what + ": " + message);
}

void EtcdClient::diagnose(std::size_t index, const EndpointFailure& failure) const {
  if (tls_ || !failure.closed_without_answer) return;
  const auto& endpoint = options_.endpoints[index];
  if (speaks_tls(endpoint, Deadline::after(options_.request_timeout)))
    throw ConfigError("etcd at " + endpoint.to_string() +
                      " serves https but no TLS option is set: give the cluster's CA file (etcd_cacert)");
}

std::string EtcdClient::joined(const std::vector<std::string>& failures) {
  std::string msg;
  for (const auto& f : failures) {
    if (f.empty()) continue;
    if (!msg.empty()) msg += "; ";
    msg += f;
  }
  return msg;
}

void EtcdClient::throw_unreachable(const std::vector<std::string>& failures) const {
  throw NetworkError(joined(failures) + " (gave up after " +
                     std::to_string(options_.connect_timeout.count()) + " ms)");
}

EtcdClient::Attempt EtcdClient::try_member(std::size_t index, const std::string& path,
                                           const std::string& text, const std::string& what) {
  // A pooled keep-alive connection may have been closed by etcd while idle: a
  // broken exchange on one is retried once on a fresh connection.
  for (int round = 0; round < 2; ++round) {
    auto conn = round == 0 ? checkout(index) : nullptr;
    const bool reused = conn != nullptr;
    try {
      if (!conn) conn = connect(index);
      auto reply = conn->post(path, text, Deadline::after(options_.request_timeout));
      if (reply.status == 200) {
        auto answer = parse_body(index, path, reply.body);
        checkin(index, std::move(conn));
        return {std::move(answer), {}};
      }
      checkin(index, std::move(conn));
      return {std::nullopt, check_reply(index, path, reply, what)};
    } catch (const EndpointFailure& f) {
      if (reused && f.kind == EndpointFailure::Kind::kBroken) continue;
      diagnose(index, f);
      return {std::nullopt, f.what()};
    }
  }
  return {std::nullopt, "etcd at " + options_.endpoints[index].to_string() + " unreachable"};
}

json EtcdClient::call(const std::string& path, const json& body, const std::string& what) {
  const std::string text = body.dump();
  const auto give_up = Deadline::after(options_.connect_timeout);
  const auto n = options_.endpoints.size();
  Backoff backoff(kBackoffBase, kBackoffCap);
  std::vector<std::string> failures(n);
  for (;;) {
    const auto first = preferred_.load();
    for (std::size_t i = 0; i < n; ++i) {
      const auto index = (first + i) % n;
      auto attempt = try_member(index, path, text, what);
      if (attempt.answer) {
        if (index != first) {
          log::get("store.etcd")
              ->info("etcd failover endpoint={} after=\"{}\"", options_.endpoints[index].to_string(),
                     failures[first]);
          preferred_.store(index);
        }
        return std::move(*attempt.answer);
      }
      failures[index] = attempt.failure;
      log::get("store.etcd")->debug("etcd request failed path={} reason=\"{}\"", path, attempt.failure);
    }
    if (give_up.expired()) throw_unreachable(failures);
    if (options_.on_unreachable) options_.on_unreachable(joined(failures));
    std::this_thread::sleep_for(std::min(backoff.next(), give_up.remaining()));
  }
}

}  // namespace ddp::store::etcd
