// A tiny HTTP/1.1 endpoint for monitoring: GET /metrics (Prometheus text
// format 0.0.4), GET /healthz and GET /readyz (the probe callback's text, 503
// when it throws: the daemon's probes go through the store's loop with a
// deadline, so a wedged loop reads as unhealthy and /metrics never blocks for
// good; /readyz is also 503 while the data dir cannot persist writes). It
// runs on its own thread and io_context so a slow scraper never delays store
// requests; numbers come from StoreServer::metrics(), a snapshot taken on the
// store's loop thread. Connections are bounded on their own (kMaxConnections,
// the oldest idle one closed for a new one) and must send their request
// within 2 s, so idle HTTP clients hold few descriptors and never for long.
//
// Thread-safety: start/stop from one thread; the destructor stops and joins.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace ddp::rendezvousd {

using MetricsSource = std::function<std::map<std::string, std::int64_t>()>;
// A probe's 200 body ("ok\n"); throws when the answer is no (the message
// becomes a 503 body).
using HealthSource = std::function<std::string()>;

struct MetricsSources {
  MetricsSource metrics;  // /metrics
  HealthSource health;    // /healthz: alive (unset: always "ok")
  HealthSource ready;     // /readyz: alive and able to do its job (unset: always "ok")
};

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
