// The store server, embeddable: ddp-rendezvousd, `ddprun --standalone`, the node
// hosting static/c10d rendezvous, and worker rank 0 in the MASTER_ADDR fallback
// all run this class.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "ddp/store/protocol.hpp"

namespace ddp::store {

struct StoreServerOptions {
  std::string host = "0.0.0.0";
  std::uint16_t port = 0;  // 0: the kernel picks a free port; see StoreServer::port()
  std::string token;       // empty: no auth
  std::string data_dir;    // empty: in memory only; else snapshot + append-only log
  // Start from a damaged data dir by keeping every intact record (and reporting
  // what was dropped) instead of refusing to start. An operator's decision.
  bool recover_corrupt_log = false;
  std::uint32_t max_connections = 65536;
  Limits limits;
  // Connections that send no complete frame within this time after connecting
  // (or stall mid-frame this long) are closed.
  std::chrono::milliseconds idle_frame_timeout{std::chrono::seconds(30)};
  // Responses queued for a client that does not read them; past this the
  // client is dropped. 0: max_frame_bytes + 8 MiB (one largest reply plus slack).
  std::size_t max_queued_bytes_per_connection = 0;
};

// Owns one event-loop thread that owns all state; no locks on the request path.
// Thread-safety: start/stop/stats may be called from any thread.
class StoreServer {
 public:
  explicit StoreServer(StoreServerOptions options);
  ~StoreServer();  // stops and joins
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // Binds, listens and starts the loop thread. Throws NetworkError naming the
  // address when the port is in use, ConfigError for an unusable data dir.
  void start();
  // Graceful stop: pending gets/waits/watches receive kShuttingDown, the log is
  // flushed, the loop thread joins. Idempotent.
  void stop();
  // After stop(): false when the data dir could not be saved (exit non-zero).
  bool saved() const;
  // Bound port (valid after start()).
  std::uint16_t port() const;
  // How long stats()/metrics() wait for the loop thread before they give up.
  static constexpr std::chrono::milliseconds kLoopAnswerTimeout{2000};
  // connections, keys, leases, watches, revision, requests, degraded (1 while
  // the data dir refuses writes), persist_failures, compaction_failures: a
  // snapshot taken on the loop. TimeoutError when the loop does not answer
  // within kLoopAnswerTimeout (it is wedged): a health probe of the loop.
  std::map<std::string, std::int64_t> stats() const;
  // stats() plus "requests.<op>", "latency_le_us.<bound>" (cumulative),
  // "latency_sum_ns", "latency_count" and "rdzv_round.<run_id>"; for monitoring.
  std::map<std::string, std::int64_t> metrics() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::store
