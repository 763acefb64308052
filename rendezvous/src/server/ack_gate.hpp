// Group commit for --fsync=always: no byte of output leaves a session before
// the log records that existed when it was queued are on disk. A reply to a
// write is its acknowledgement, and a read's reply or a watch event may show
// a write that a power loss could still take back, so every reply waits.
//
// The log is fdatasync'ed off the loop thread (LogSyncer), one sync at a
// time, each covering every record appended before it started: while one runs
// the loop goes on handling requests, whose replies wait for the next
// (pipelined, as etcd's WAL does). Each session notes, for the bytes it
// queues while some record is not on disk yet, the record they wait for; it
// writes the bytes whose records are durable, and waits here for the rest.
//
// Thread-safety: loop thread only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

namespace ddp::store::server {

class Session;

// Bytes [begin, end) of a session's queue wait for log record `seq`.
struct AckMark {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::uint64_t seq = 0;
};

class AckGate {
 public:
  // Records up to `seq` are in the log (written, maybe not on disk).
  void appended(std::uint64_t seq) { appended_ = std::max(appended_, seq); }
  // Records up to `seq` are on disk; the caller then releases the held sessions.
  void durable(std::uint64_t seq) { durable_ = std::max(durable_, seq); }
  std::uint64_t appended() const { return appended_; }
  std::uint64_t durable() const { return durable_; }

  // `begin`..`end` of a queue were just added: marks them when they wait.
  void mark(std::deque<AckMark>& marks, std::size_t begin, std::size_t end) const {
    if (appended_ <= durable_) return;
    if (!marks.empty() && marks.back().seq == appended_ && marks.back().end == begin) {
      marks.back().end = end;
    } else {
      marks.push_back({begin, end, appended_});
    }
  }
  // How many bytes from the front of a queue of `size` may be written now.
  // Marks come in order of offset and of record (the records only grow), and
  // bytes queued with nothing waiting follow marks that are durable already.
  std::size_t writable(const std::deque<AckMark>& marks, std::size_t size) const {
    for (const auto& m : marks) {
      if (m.seq > durable_) return m.begin;
    }
    return size;
  }
  // `n` bytes left the front of the queue.
  static void consumed(std::deque<AckMark>& marks, std::size_t n) {
    while (!marks.empty() && marks.front().end <= n) marks.pop_front();
    for (auto& m : marks) {
      m.begin = m.begin > n ? m.begin - n : 0;
      m.end -= n;
    }
  }

  // A session with bytes that must wait; each one once.
  void hold(std::shared_ptr<Session> s) { held_.push_back(std::move(s)); }
  // The held sessions, to write what may go now (or to close).
  std::vector<std::shared_ptr<Session>> release() { return std::exchange(held_, {}); }

 private:
  std::uint64_t appended_ = 0;
  std::uint64_t durable_ = 0;
  std::vector<std::shared_ptr<Session>> held_;
};

}  // namespace ddp::store::server
