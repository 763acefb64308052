// libFuzzer target: what a client sends to ddp-rendezvousd's metrics port.
// Each input is written whole to a new connection of a real MetricsHttp
// (Beast's request parser within the endpoint's limits, then our routing),
// which is then half-closed; the answer is read to its end. Findings: a
// crash or sanitizer report, an answer that is not HTTP, no answer to a
// request that parsed, or a server that stops answering /healthz.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "metrics_http.hpp"

namespace {

ddp::rendezvousd::MetricsHttp& server() {
  static ddp::rendezvousd::MetricsHttp* http = [] {
    ddp::rendezvousd::MetricsSources sources;
    sources.metrics = [] {
      return std::map<std::string, std::int64_t>{{"connections", 1}, {"requests_total{op=\"get\"}", 7}};
    };
    sources.ready = []() -> std::string { throw std::runtime_error("not ready, cannot persist: test"); };
    auto* h = new ddp::rendezvousd::MetricsHttp("127.0.0.1", 0, std::move(sources));
    h->start();
    return h;
  }();
  return *http;
}

// Sends `request`, half-closes, and returns everything the server wrote
// before closing (or before 5 s of silence, which is a finding: the server
// waits at most 2 s for a request and answers at once).
std::string exchange(std::string_view request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) std::abort();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(server().port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Each exchange leaves a TIME_WAIT behind (the server closes first); at a
  // thousand exchanges a second one source address runs through its ports in
  // seconds, and a reused port can meet its old connection's state. So the
  // source address goes round 127.0.0.2-127.0.0.254.
  static unsigned next_source = 0;
  sockaddr_in source{};
  source.sin_family = AF_INET;
  source.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + (next_source++ % 253));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof source) != 0) std::abort();
  // libFuzzer's SIGALRM (its -timeout watch) can interrupt a connect whose SYN
  // met one of the server's TIME_WAITs and waits for its retransmission; the
  // connection goes on in the kernel, so wait for it rather than give up.
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINTR) std::abort();
    pollfd pfd{fd, POLLOUT, 0};
    int ready = 0;
    do ready = ::poll(&pfd, 1, 5000);
    while (ready < 0 && errno == EINTR);
    int error = 0;
    socklen_t len = sizeof error;
    if (ready != 1 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) std::abort();
  }
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::size_t off = 0;
  while (off < request.size()) {
    const auto n = ::send(fd, request.data() + off, request.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the server closed early (a request over its limit): fine
    off += static_cast<std::size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string answer;
  char buf[65536];
  for (;;) {
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) std::abort();  // no answer and no close
      break;                                                      // reset: fine
    }
    answer.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return answer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 64 * 1024) return 0;
  const std::string_view request(reinterpret_cast<const char*>(data), size);
  const auto answer = exchange(request);
  if (!answer.empty() && answer.rfind("HTTP/1.", 0) != 0) std::abort();
  // A plain GET of a known path always gets its answer, whatever came before.
  static constexpr std::string_view kProbe = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  // An empty answer is a reset connection, which loopback can give a client
  // under this churn, or a close after the server's 2 s request timeout when
  // a loaded box starved its thread past it (3 in a row once, under CI's
  // sanitizer run): tried again, 100 ms apart, for about a second. A server
  // that stopped answering gives nothing every time. Any answer but 200 is a
  // finding.
  constexpr int kProbes = 10;
  std::string probe;
  for (int attempt = 0; attempt < kProbes && probe.empty(); ++attempt) {
    if (attempt > 0) ::usleep(100 * 1000);
    probe = exchange(kProbe);
  }
  if (probe.rfind("HTTP/1.1 200", 0) != 0) {
    std::fprintf(stderr, "/healthz answered: %s\n",
                 probe.empty() ? "(nothing, 10 times in a row)" : probe.c_str());
    std::abort();
  }
  return 0;
}
