// Durability for --data-dir: a snapshot of the keys and leases plus an
// append-only log of every mutation since (the format: persistence_format.hpp).
//
// Promises (docs/operations.md, "Durability"):
// - An acknowledged mutation is in the log: append() write(2)s the record before
//   the response exists, and a failed append throws after cutting the file back
//   to its last whole record, so nothing is ever appended after a torn one.
// - With --fsync=always (the default) it is also on disk: the dispatcher holds
//   every reply until an fdatasync of the log (LogSyncer, off the loop) has
//   covered the records before it (group commit, ack_gate.hpp). With
//   --fsync=never, fsync happens on snapshot and on graceful stop only, so a
//   power loss or a file system error can lose the writes since the last
//   snapshot. A failed sync fails the persistence for good (sync_failed()):
//   after a failed fsync the kernel may have dropped the dirty pages, so a
//   second fsync could report success for data that is gone.
// - Every file is created or replaced by write, fsync, rename, fsync of the
//   directory; a data dir it creates is fsynced into its parent.
// - open() cuts a torn tail (an incomplete last record, as a crash mid-write
//   leaves) with a warning, but refuses to start (ConfigError naming the file
//   and byte offset, file untouched) on damage anywhere else, unless the
//   operator asked for recovery: then every intact record is kept, what was
//   dropped is reported, and the damaged files are kept as *.corrupt.<time>.
// - A failed append or compaction puts the store in degraded mode (writes fail,
//   reads work) until a write or probe() succeeds again.
//
// Snapshots hold no watch history: after a restart, a watch from before the
// snapshot's revision gets kCompacted.
//
// Thread-safety: none; used from the server's loop thread only.
#pragma once

#include <cstdint>
#include <string>

#include "ddp/common/deadline.hpp"
#include "ddp/common/error.hpp"
#include "mutation.hpp"
#include "store_core.hpp"

namespace ddp::store::server {

// A write to the data dir failed; the store state is unchanged by it.
class PersistError : public Error {
 public:
  using Error::Error;
};

class Persistence {
 public:
  // Why 64 MiB: replay of that much log takes well under a second, and rewriting
  // the snapshot more often would cost more than it saves.
  static constexpr std::uint64_t kDefaultCompactBytes = 64ull << 20;

  // `durable` (--fsync=always): open() also fsyncs the log it read, which a
  // crashed daemon may have left in the page cache only.
  explicit Persistence(std::string dir, std::uint64_t compact_bytes = kDefaultCompactBytes,
                       bool recover_corrupt = false, bool durable = false);
  ~Persistence();
  Persistence(const Persistence&) = delete;
  Persistence& operator=(const Persistence&) = delete;

  // Creates the dir (0700) when missing, loads snapshot then log into `core`
  // (leases get their full TTL from `now`) and opens the log for appending.
  // ConfigError naming the file (and byte offset) when it cannot.
  void open(StoreCore& core, Clock::time_point now);
  // Appends one record; PersistError when the write fails (the log is then as
  // it was before the call, or the next append cuts it back first).
  void append(const Mutation& m);
  // The last record appended (0: none yet), and the log's fd to sync (-1: none).
  std::uint64_t last_seq() const { return next_seq_ - 1; }
  int log_fd() const { return log_fd_; }
  // An fdatasync of the log covered the records up to `seq` (counted).
  void synced(std::uint64_t seq);
  // An fdatasync of the log failed with `err`: the persistence is failed for
  // good (every later append, compaction and close throws PersistError).
  // Returns why, for the log.
  std::string sync_failed(int err);
  bool wants_compaction() const { return log_bytes_ > compact_bytes_; }
  // Writes a new snapshot of `core` and starts an empty log; PersistError on
  // failure, leaving no snapshot.tmp and the old snapshot and log in use.
  void compact(const StoreCore& core);
  // Graceful stop: compact and close; PersistError when that failed.
  void close(const StoreCore& core);
  // While degraded: cuts a pending torn tail and leaves degraded mode when that
  // worked and the file system has room again. True when no longer degraded.
  bool probe();

  bool degraded() const { return degraded_; }
  // A sync() failed: nothing more is written until a restart.
  bool failed() const { return !failed_reason_.empty(); }
  const std::string& degraded_reason() const { return degraded_reason_; }
  std::uint64_t write_failures() const { return write_failures_; }
  // Successful syncs: with group commit, fewer than the writes they cover.
  std::uint64_t syncs() const { return syncs_; }
  const std::string& dir() const { return dir_; }

 private:
  void load_snapshot(StoreCore& core, Clock::time_point now);
  void replay_log(StoreCore& core, Clock::time_point now);
  void open_log_for_append();
  void start_new_log();
  // Cuts the log back to log_bytes_ after a failed append; false when it could not.
  bool cut_back();
  void enter_degraded(const std::string& why);
  void leave_degraded();
  // Keeps a damaged file as <name>.corrupt.<unix time> for --recover-corrupt-log.
  void keep_corrupt_copy(const std::string& name);

  std::string dir_;
  std::uint64_t compact_bytes_;
  bool recover_corrupt_;
  bool durable_;
  int log_fd_ = -1;
  std::uint64_t log_bytes_ = 0;
  std::uint64_t next_seq_ = 1;
  std::uint64_t snapshot_seq_ = 0;
  bool snapshot_found_ = false;
  bool compact_after_open_ = false;
  bool needs_cut_ = false;
  std::string failed_reason_;
  bool degraded_ = false;
  std::string degraded_reason_;
  std::uint64_t write_failures_ = 0;
  std::uint64_t syncs_ = 0;
  std::uint64_t last_failed_bytes_ = 0;
};

}  // namespace ddp::store::server
