// The store server, embeddable: ddp-rendezvousd, `ddprun --standalone`, the node
// hosting static/c10d rendezvous, and worker rank 0 in the MASTER_ADDR fallback
// all run this class.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ddp/store/job_report.hpp"
#include "ddp/store/protocol.hpp"

namespace ddp::store {

// How a server reads PyTorch TCPStore clients that open without VALIDATE. torch
// 1.x, 2.0 and 2.1 all do, with the same first bytes; 1.x and 2.0 share one op
// numbering, 2.1 has another (DELETE_KEY 7, APPEND 8, MULTI_GET 9, MULTI_SET 10,
// CANCEL_WAIT 11), so the server cannot tell them apart and is told. Verified
// with real clients: 1.13.1, 2.0.1, 2.1.2 (docs/store-protocol.md). torch 2.2+
// opens with VALIDATE and is recognised whatever this says.
//
// There is deliberately no kTorch20: before this was checked against a real
// client, a kTorch20 meant the numbering that turned out to be torch 2.1's,
// which a real 2.0 client does not speak. Code that named it now fails to
// compile and must choose: kTorch1 for torch 1.x and 2.0, kTorch21 for 2.1.
enum class TorchLegacyProtocol : std::uint8_t { kTorch1, kTorch21 };

// The values `--torch-legacy-protocol` and `torch_legacy_protocol=` accept, for
// messages, and the parse of one: the torch version of the clients that open
// without VALIDATE ("1" for any 1.x). nullopt for anything else.
inline constexpr const char* kTorchLegacyProtocolValues =
    "1 (torch 1.x), 2.0 or 2.1; torch 2.2 and later open with VALIDATE and need no setting";
inline std::optional<TorchLegacyProtocol> parse_torch_legacy_protocol(std::string_view value) {
  if (value == "1" || value == "2.0") return TorchLegacyProtocol::kTorch1;
  if (value == "2.1") return TorchLegacyProtocol::kTorch21;
  return std::nullopt;
}

// When a write to a data dir counts as saved (StoreServerOptions::fsync).
// kAlways: no reply leaves the server while the log holds a record that is not
// fsynced yet: every acknowledged write survives a power loss or a file
// system error (etcd's rule). Group commit: one fdatasync, off the loop,
// covers every record appended since the last one. kNever: written with write(2), fsynced
// at compaction and at a graceful stop only; a crash of the daemon loses
// nothing acknowledged, a power loss or a file system error may lose the last
// seconds of writes (or all of them since the last compaction).
enum class FsyncMode : std::uint8_t { kAlways, kNever };
inline constexpr const char* kFsyncModeValues = "always or never";
inline std::optional<FsyncMode> parse_fsync_mode(std::string_view value) {
  if (value == "always") return FsyncMode::kAlways;
  if (value == "never") return FsyncMode::kNever;
  return std::nullopt;
}

struct StoreServerOptions {
  std::string host = "0.0.0.0";
  std::uint16_t port = 0;  // 0: the kernel picks a free port; see StoreServer::port()
  std::string token;       // empty: no auth
  std::string data_dir;    // empty: in memory only; else snapshot + append-only log
  // Start from a damaged data dir by keeping every intact record (and reporting
  // what was dropped) instead of refusing to start. An operator's decision.
  bool recover_corrupt_log = false;
  // With a data_dir: when an acknowledged write is on disk (FsyncMode).
  FsyncMode fsync = FsyncMode::kAlways;
  // With a data_dir: once the log passes this many bytes, the store is written
  // as a new snapshot and the log starts afresh. 0: 64 MiB.
  std::uint64_t snapshot_log_bytes = 0;
  // Called on the loop thread when the data dir failed in a way that leaves
  // no safe way on: an fsync of the log failed (the kernel may have dropped
  // the dirty pages, so a retry could "succeed" without the data). The
  // replies held for it are never sent (their connections are closed) and
  // every later write is refused; the daemon stops itself here. Unset: the
  // server goes on refusing writes.
  std::function<void(const std::string& why)> on_fatal;
  // Past this, a new connection is closed at accept; with a token required,
  // the oldest connection still in its handshake is closed instead to make
  // room (likewise when accept() runs out of descriptors).
  std::uint32_t max_connections = 65536;
  Limits limits;
  // Connections that send no complete frame within this time after connecting
  // (or stall mid-frame this long) are closed.
  std::chrono::milliseconds idle_frame_timeout{std::chrono::seconds(30)};
  // Responses queued for a client that does not read them; past this the
  // client is dropped. 0: max_frame_bytes + 8 MiB (one largest reply plus slack).
  std::size_t max_queued_bytes_per_connection = 0;
  TorchLegacyProtocol torch_legacy_protocol = TorchLegacyProtocol::kTorch1;
  // Incomplete requests buffered by all connections together; a connection
  // that takes the total past this is dropped. 0: no cap. Why 256 MiB: three
  // largest frames (max_frame_bytes) arriving at once still fit.
  std::size_t max_buffered_request_bytes = 256u << 20;
  // The same for connections that have not completed their handshake, which
  // count here and not above; past it the oldest of them holding bytes are
  // closed. Why 16 MiB: a real HELLO is tens of bytes and nearly always read
  // whole; this is 128 clients stalled in the largest HELLO a server takes
  // (64 KiB, buffered in up to 128 KiB), and no flood of them costs more.
  std::size_t max_preauth_buffered_bytes = 16u << 20;
  // Replies queued for clients that do not read them, all connections
  // together; past this the connections holding the most are dropped, largest
  // first, until the total is back within it. 0: no cap (each connection's
  // max_queued_bytes_per_connection still holds). Why 256 MiB: three of the
  // largest replies (a 64 MiB value) queued at once still fit, while 100
  // watchers that never read cost this, not 100 x 88 MiB.
  std::size_t max_queued_reply_bytes = 256u << 20;
  // Watch history kept for watches from a past revision, capped in events and
  // in key + value bytes (0: the defaults, 100,000 events and 64 MiB).
  std::size_t history_max_events = 0;
  std::size_t history_max_bytes = 0;
  // Failed authentication, per peer address: the first auth_free_failures are
  // answered at once; after that the answer to each wrong token is held
  // auth_backoff_base, doubling per failure up to auth_backoff_max. The right
  // token is always let in at once. Failures are logged once, then summarised
  // every auth_log_period. Why 4 s at most: a held answer must reach TcpStore
  // before its 5 s handshake timeout, or a client with a stale token reports a
  // silent server instead of a wrong token.
  int auth_free_failures = 3;
  std::chrono::milliseconds auth_backoff_base{100};
  std::chrono::milliseconds auth_backoff_max{std::chrono::seconds(4)};
  std::chrono::milliseconds auth_log_period{std::chrono::seconds(10)};
  // Reclaiming what finished jobs leave (docs/operations.md, "Key reclamation"):
  // when round R of a job closes, its rounds <= R - keep_rounds are deleted
  // (0: keep every round); a job with no leased key that wrote nothing for
  // reclaim_idle_jobs loses all its keys (0: never). Why 2 rounds: the round
  // before the current one is still read by late joiners and the round monitor.
  // Why one hour: long enough to read a finished job with `ddp-store status`.
  int keep_rounds = 2;
  std::chrono::milliseconds reclaim_idle_jobs{std::chrono::hours(1)};
  // One info line on the "store.jobs" logger per event in a ddprun job's life
  // (formed, restarted and why, succeeded, failed, stopped, reclaimed): for
  // ddp-rendezvousd; an embedded server leaves it off.
  bool log_jobs = false;
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
  // "latency_sum_ns", "latency_count"; for monitoring.
  std::map<std::string, std::int64_t> metrics() const;
  // The ddprun jobs in the store (job_report.hpp), read on the loop in
  // bounded slices so that store requests are served meanwhile. Call from
  // any thread but the loop's. TimeoutError when it takes longer than
  // kJobsTimeout (the loop is wedged); StoreError when too many listings run
  // at once or the server stops first. An empty report before start().
  static constexpr std::chrono::milliseconds kJobsTimeout{10000};
  JobsReport jobs(const JobQuery& query) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::store
