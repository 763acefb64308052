// A tiny HTTP/1.1 endpoint for monitoring: GET /metrics (Prometheus text
// format 0.0.4), the status page (GET /, /job, /api/jobs: status_page.hpp),
// GET /healthz and GET /readyz (the probe callback's text, 503
// when it throws: the daemon's probes go through the store's loop with a
// deadline, so a wedged loop reads as unhealthy and /metrics never blocks for
// good; /readyz is also 503 while the data dir cannot persist writes). It
// runs on its own thread and io_context so a slow scraper never delays store
// requests; numbers come from StoreServer::metrics(), a snapshot taken on the
// store's loop thread. Connections are bounded on their own (kMaxConnections,
// the oldest idle one closed for a new one) and must send their request
// within 2 s, so idle HTTP clients hold few descriptors and never for long.
// /metrics and the page are rendered on a second thread, so that a page of a
// big job or a slow scrape never holds up a probe.
//
// Thread-safety: start/stop from one thread; the destructor stops and joins.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace ddp::rendezvousd {

using MetricsSource = std::function<std::map<std::string, std::int64_t>()>;
// A probe's 200 body ("ok\n"); throws when the answer is no (the message
// becomes a 503 body).
using HealthSource = std::function<std::string()>;

// An answer of the status page.
struct PageReply {
  int status = 200;
  std::string content_type = "text/html; charset=utf-8";
  std::string body;
};
// Answers a status page path ("/", "/job", "/api/jobs") with its query string.
using PageSource = std::function<PageReply(const std::string& path, const std::string& query)>;

struct MetricsSources {
  MetricsSource metrics;  // /metrics
  // /metrics: the per-job series, after the store's (unset: none).
  std::function<std::string()> job_metrics;
  HealthSource health;  // /healthz: alive (unset: always "ok")
  HealthSource ready;   // /readyz: alive and able to do its job (unset: always "ok")
  PageSource page;      // the status page (unset: 404)
  // Non-empty: the page answers only requests that carry this token, as
  // "Authorization: Bearer TOKEN" or as the password of Basic authentication
  // (which a browser asks for); any other is 401 with nothing of the store.
  std::string token;
};

// Whether an Authorization header value carries `token` (Bearer, or Basic
// with any user name and the token as the password). Compared in constant
// time in the token's length.
bool authorized(std::string_view header, const std::string& token);

// Renders a metrics() snapshot as Prometheus text (exposed for tests of the format).
std::string render_prometheus(const std::map<std::string, std::int64_t>& m);

class MetricsHttp {
 public:
  // HTTP connections open at once. Why 16: a Prometheus server and a few
  // probes need one or two each; the bound keeps HTTP clients off the
  // descriptors the store port needs, whatever they do.
  static constexpr std::size_t kMaxConnections = 16;

  MetricsHttp(std::string host, std::uint16_t port, MetricsSources sources);
  ~MetricsHttp();
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;

  // Binds and starts serving; NetworkError naming host:port when it cannot.
  void start();
  void stop();
  std::uint16_t port() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::rendezvousd
