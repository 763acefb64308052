// The connections that have not completed their handshake yet (no HELLO with
// the right token, or no byte at all), in the order they were accepted, and
// the request bytes they buffer. Those bytes count here, against a small
// budget of their own, and never against the authenticated clients'
// max_buffered_request_bytes. Past the budget the oldest of these connections
// holding bytes are closed first: a flood of half-sent HELLOs costs the
// flood's own oldest connections, while a real client, whose HELLO arrives in
// one piece and is answered at once, hardly ever holds a byte here.
//
// The server also asks for the oldest one when it runs out of connection
// slots or descriptors (StoreServer, with a token required).
//
// Thread-safety: loop thread only. A session leaves before it is destroyed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>

namespace ddp::store::server {

class Session;

class PreauthPool {
 public:
  explicit PreauthPool(std::size_t max_bytes) : max_bytes_(max_bytes) {}

  void enter(Session& s);
  // Handshake done, or closed: its bytes are released. Idempotent.
  void leave(Session& s);
  // `s` now buffers `bytes`; while the pool is over its budget, closes the
  // oldest connections holding bytes (perhaps `s` itself). False when `s` was
  // closed.
  bool charge(Session& s, std::size_t bytes);
  // Closes the oldest connection still in its handshake to make room for a new
  // one; false when there is none. `why` goes to the log.
  bool close_oldest(const char* why);

  std::size_t size() const { return entries_.size(); }
  std::size_t bytes() const { return bytes_; }
  std::uint64_t closed() const { return closed_; }

 private:
  struct Entry {
    std::uint64_t seq = 0;
    std::size_t bytes = 0;
  };
  // Closes `victim`, logging the first of a burst at once and then one line
  // per kLogPeriod with how many went meanwhile.
  void evict(Session& victim, const char* why);

  std::size_t max_bytes_;
  std::size_t bytes_ = 0;
  std::uint64_t next_seq_ = 0;
  std::uint64_t closed_ = 0;
  std::uint64_t unlogged_ = 0;
  std::chrono::steady_clock::time_point last_log_{};
  std::unordered_map<Session*, Entry> entries_;
  std::map<std::uint64_t, Session*> by_age_;   // every connection of the pool
  std::map<std::uint64_t, Session*> holding_;  // those buffering bytes
};

}  // namespace ddp::store::server
