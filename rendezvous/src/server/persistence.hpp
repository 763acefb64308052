// Durability for --data-dir: a snapshot of the whole state plus an append-only
// log of every mutation since. Each acknowledged mutation is written (write(2))
// to the log before its response is queued, so it survives a crash of the
// daemon; fsync happens on snapshot and on graceful stop, so a power loss can
// lose the last writes (the trade-off etcd makes configurable; we chose speed).
//
// Files in the data dir:
//   snapshot   "DDPSNAP1" | u32 crc32(body) | u64 body length | body
//   log        "DDPLOG01" | records: u32 body length | u32 crc32(body) | body
// A torn or corrupt record at the log's end (a crash mid-write) is cut off with
// a warning. The snapshot also holds the recent-event ring, so a watch can resume
// across a restart. docs/store-protocol.md describes the bodies.
//
// Thread-safety: none; used from the server's loop thread only.
#pragma once

#include <cstdint>
#include <string>

#include "ddp/common/deadline.hpp"
#include "mutation.hpp"
#include "store_core.hpp"

namespace ddp::store::server {

class Persistence {
 public:
  // Why 64 MiB: replay of that much log takes well under a second, and rewriting
  // the snapshot more often would cost more than it saves.
  static constexpr std::uint64_t kDefaultCompactBytes = 64ull << 20;

  explicit Persistence(std::string dir, std::uint64_t compact_bytes = kDefaultCompactBytes);
  ~Persistence();
  Persistence(const Persistence&) = delete;
  Persistence& operator=(const Persistence&) = delete;

  // Loads snapshot then log into `core` (leases get their full TTL from `now`)
  // and opens the log for appending. ConfigError naming the path when the dir
  // is missing, unwritable or holds a corrupt snapshot.
  void open(StoreCore& core, Clock::time_point now);
  // Appends one record; throws ddp::Error when the write fails (disk full).
  void append(const Mutation& m);
  bool wants_compaction() const { return log_bytes_ > compact_bytes_; }
  // Writes a new snapshot of `core` and starts an empty log.
  void compact(const StoreCore& core);
  // Graceful stop: compact and close.
  void close(const StoreCore& core);
  const std::string& dir() const { return dir_; }

 private:
  void load_snapshot(StoreCore& core, Clock::time_point now);
  void replay_log(StoreCore& core, Clock::time_point now);
  void open_log_for_append();
  void start_new_log();

  std::string dir_;
  std::uint64_t compact_bytes_;
  int log_fd_ = -1;
  std::uint64_t log_bytes_ = 0;
  std::uint64_t next_seq_ = 1;
  std::uint64_t snapshot_seq_ = 0;
};

}  // namespace ddp::store::server
