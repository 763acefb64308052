// fdatasync of the data dir's log on a thread of its own (--fsync=always), so
// that the loop goes on handling requests while the disk flushes; their
// replies wait for the next sync (ack_gate.hpp). One sync at a time.
//
// Thread-safety: start() and stop() on the loop thread; `done` is posted to
// the loop; none is posted after stop() returns.
#pragma once

#include <boost/asio/io_context.hpp>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace ddp::store::server {

class LogSyncer {
 public:
  // Records up to `seq` are on disk (err 0), or the fdatasync failed (errno).
  using Done = std::function<void(std::uint64_t seq, int err)>;

  LogSyncer(boost::asio::io_context& io, Done done);
  ~LogSyncer();  // stop()
  LogSyncer(const LogSyncer&) = delete;
  LogSyncer& operator=(const LogSyncer&) = delete;

  // Syncs `fd` (a duplicate is taken: the caller may close or replace its
  // own, as a compaction does) for the records up to `seq`; `done` follows.
  // Without a descriptor to spare, syncs here, on the caller's thread. False
  // when a sync is still running or the syncer is stopped.
  bool start(int fd, std::uint64_t seq);
  bool busy() const { return busy_; }
  // Waits for a running sync and joins the thread; no `done` after it.
  void stop();

 private:
  void run();
  // On the loop: a sync ended; `done` unless stopped meanwhile.
  void finished(std::uint64_t seq, int err);

  boost::asio::io_context& io_;
  Done done_;
  bool busy_ = false;     // loop thread's view: started, its done not run yet
  bool stopped_ = false;  // loop thread's: stop() ran
  std::mutex mu_;
  std::condition_variable cv_;
  int fd_ = -1;  // the duplicate to sync, handed to the thread
  std::uint64_t seq_ = 0;
  bool stopping_ = false;
  bool started_thread_ = false;
  std::thread thread_;
};

}  // namespace ddp::store::server
