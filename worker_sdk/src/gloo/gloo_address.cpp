#include "gloo/gloo_address.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>

#include "ddp/common/endpoint.hpp"

namespace ddp::detail {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<std::string> store_host() {
  if (auto ep = env("DDP_STORE_ENDPOINT")) {
    try {
      return parse_endpoint(*ep, "DDP_STORE_ENDPOINT").host;
    } catch (const std::exception&) {
      return std::nullopt;  // init() reports the malformed value
    }
  }
  return env("MASTER_ADDR");
}

bool is_loopback_sockaddr(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
  }
  return false;
}

std::string numeric_host(const sockaddr* sa, socklen_t len) {
  char buf[NI_MAXHOST];
  if (getnameinfo(sa, len, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0) return {};
  return buf;
}

bool resolves_to_loopback(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  const bool loop = res != nullptr && is_loopback_sockaddr(res->ai_addr);
  freeaddrinfo(res);
  return loop;
}

// The first non-loopback address of the hostname that we can actually bind.
std::optional<std::string> hostname_address() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return std::nullopt;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(name, nullptr, &hints, &res) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (addrinfo* ai = res; ai != nullptr && !found; ai = ai->ai_next) {
    if (is_loopback_sockaddr(ai->ai_addr)) continue;
    const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0) found = numeric_host(ai->ai_addr, ai->ai_addrlen);
    close(fd);
  }
  freeaddrinfo(res);
  return found;
}

// connect() on a UDP socket sends nothing but makes the kernel pick the source
// address of the route to `host`: the address that host can reach us on.
std::optional<std::string> route_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0) return std::nullopt;
  std::optional<std::string> found;
  const int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      found = numeric_host(reinterpret_cast<sockaddr*>(&local), len);
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return found;
}

}  // namespace

GlooAddress choose_gloo_address(const std::string& requested) {
  if (!requested.empty()) return {requested, {}, "ProcessGroupOptions::interface"};
  if (auto v = env("DDP_GLOO_IFNAME")) return {*v, {}, "DDP_GLOO_IFNAME"};
  if (auto v = env("GLOO_SOCKET_IFNAME")) return {*v, {}, "GLOO_SOCKET_IFNAME"};
  const auto host = store_host();
  if (host && resolves_to_loopback(*host)) return {{}, "127.0.0.1", "the store is on loopback"};
  const auto local_world = env("LOCAL_WORLD_SIZE");
  const auto world = env("WORLD_SIZE");
  if (local_world && world && *local_world == *world) return {{}, "127.0.0.1", "single-host job"};
  if (auto addr = hostname_address()) return {{}, *addr, "hostname address"};
  if (host) {
    if (auto addr = route_address(*host)) return {{}, *addr, "route to the store host"};
  }
  return {{}, "127.0.0.1", "no other address found"};
}

}  // namespace ddp::detail
