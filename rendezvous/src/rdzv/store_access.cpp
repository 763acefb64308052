#include "store_access.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "ddp/common/error.hpp"
#include "ddp/common/logging.hpp"
#include "ddp/store/tcp_store.hpp"
#include "keys.hpp"
#include "retry_notice.hpp"

namespace ddp::rdzv::detail {

namespace {

std::string addr_text(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

bool is_loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr);
  }
  return false;
}

// The StoreServer a node hosts listens on every interface so that other
// machines reach it through whatever address they were given.
std::unique_ptr<store::StoreServer> start_server(const RendezvousConfig& config) {
  return host_store(config, "0.0.0.0", config.endpoint.port);
}

}  // namespace

std::unique_ptr<store::StoreServer> host_store(const RendezvousConfig& config, const std::string& host,
                                               std::uint16_t port) {
  store::StoreServerOptions opts;
  opts.host = host;
  opts.port = port;
  opts.token = config.token;
  opts.torch_legacy_protocol = config.torch_legacy_protocol;
  auto server = std::make_unique<store::StoreServer>(opts);
  server->start();
  return server;
}

bool is_local_host(const std::string& host) {
  if (host == "localhost") return true;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0 && host == name) return true;

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  std::set<std::string> wanted;
  bool loop = false;
  for (auto* p = res; p != nullptr; p = p->ai_next) {
    if (is_loopback(p->ai_addr)) loop = true;
    wanted.insert(addr_text(p->ai_addr));
  }
  freeaddrinfo(res);
  if (loop) return true;

  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return false;
  bool local = false;
  for (auto* i = ifs; i != nullptr && !local; i = i->ifa_next) {
    if (i->ifa_addr != nullptr && wanted.count(addr_text(i->ifa_addr)) > 0) local = true;
  }
  freeifaddrs(ifs);
  return local;
}

StoreAccess open_store(const RendezvousConfig& config, HostMode mode, const std::string& flag,
                       Unreachable unreachable) {
  StoreAccess access;
  auto logger = log::get("rdzv");
  const std::string where = config.endpoint.to_string();
  if (mode == HostMode::kAlways) {
    try {
      access.server = start_server(config);
    } catch (const NetworkError& e) {
      throw ConfigError(flag + ": cannot host the rendezvous store on port " +
                        std::to_string(config.endpoint.port) + ": " + e.what() + "; pick a free port");
    }
    logger->info("hosting the rendezvous store endpoint=0.0.0.0:{} run_id={}", access.server->port(),
                 config.run_id);
  } else if (mode == HostMode::kIfLocal && config.endpoint.port != 0 && is_local_host(config.endpoint.host)) {
    // Whoever binds first hosts; a daemon (or another agent of this machine)
    // already listening makes the bind fail and this agent a client.
    try {
      access.server = start_server(config);
      logger->info("no store at {}: hosting it in this agent run_id={}", where, config.run_id);
    } catch (const NetworkError& e) {
      logger->debug("endpoint {} is taken, joining as a client: {}", where, e.what());
    }
  }

  store::TcpStoreOptions opts;
  opts.endpoint = config.endpoint;
  if (access.server) opts.endpoint.port = access.server->port();
  opts.token = config.token;
  opts.connect_timeout = config.handed_store
                             ? std::min(config.handed_store->connect_timeout, config.join_timeout)
                             : config.join_timeout;
  const auto first_wait = opts.connect_timeout;
  try {
    if (!access.server) {
      // The first connect may wait for the store as long as the join timeout
      // (nodes start in any order; a handed-down store, its shorter bound);
      // reconnects give up within the keep-alive window, so that a dead store
      // is reported as lost instead of retried for the whole join timeout. One
      // connection for both: a probe connection first cost the store an
      // accept, a hello, a ping and a close per agent.
      opts.first_connect_timeout = first_wait;
      opts.on_connect_retry =
          RetryNotice(where, first_wait, first_wait == config.join_timeout ? "--rdzv_conf join_timeout" : "");
    }
    opts.connect_timeout = std::max(keep_alive_window(config), std::chrono::milliseconds(1000));
    opts.request_timeout = std::max(config.keep_alive_interval, std::chrono::milliseconds(1000));
    // A node's lease also ends with its connection: an agent killed with -9 is
    // seen gone at once; the TTL still covers a hung or unreachable agent.
    opts.bind_leases_to_connection = true;
    access.client = std::make_shared<store::TcpStore>(opts);
  } catch (const NetworkError& e) {
    const std::string what = "cannot reach the rendezvous store at " + where + " (" + flag +
                             ") after waiting " + seconds_text(first_wait) + ": " + e.what();
    if (unreachable == Unreachable::kConfigError) throw ConfigError(what);
    throw RendezvousError(what);
  } catch (const ProtocolError& e) {
    // Something else listens there: say what, at once, instead of waiting out join_timeout.
    throw ConfigError(flag + " " + e.what() +
                      "; check it (an etcd endpoint needs --rdzv_backend=etcd; a torchrun master port serves "
                      "torch's own store, not this one)");
  } catch (const StoreError& e) {
    throw ConfigError("the rendezvous store at " + where + " (" + flag + ") refused this agent: " + e.what() +
                      "; check the store token");
  }
  return access;
}

}  // namespace ddp::rdzv::detail
