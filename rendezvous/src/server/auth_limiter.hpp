// Rate limit for failed authentication, per peer address. The first few
// failures from an address cost nothing (a typo, a stale token file); after
// that each failure earns the address a delay that doubles per failure, up to
// a maximum: the dispatcher holds the answer to a wrong token that long, so a
// guesser waits for each verdict. The right token is never held (it is always
// compared and let in at once): an address shared with a guesser must not lock
// out the client that has the token. An address is forgotten a minute after
// its last failure. Also counts failures for the aggregate log line, so a
// flood of guesses makes one line per period, not one per guess.
//
// Time is passed in, so the logic is tested without sleeping.
// Thread-safety: none; owned by the dispatcher on the loop thread.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "ddp/common/deadline.hpp"

namespace ddp::store::server {

struct AuthBackoff {
  int free_failures = 3;
  Millis base{100};
  Millis max{4000};  // StoreServerOptions::auth_backoff_max says why
  // Why 60 s: long past the largest delay, so a slow attacker keeps his delay,
  // while an operator who fixed a token file starts afresh a minute later.
  Millis forget_after{60000};
};

class AuthLimiter {
 public:
  // Why 10,000: addresses in the table at once; past it, forgotten entries are
  // pruned and then the one with the oldest failure goes.
  static constexpr std::size_t kMaxPeers = 10'000;

  struct Summary {
    std::uint64_t failed = 0;   // tokens compared and wrong (or missing)
    std::uint64_t delayed = 0;  // of those, answers held because the address had to wait
    std::size_t peers = 0;      // distinct addresses (at most kMaxPeers counted)
    std::string top_peer;
    std::uint64_t top_count = 0;
  };

  explicit AuthLimiter(AuthBackoff backoff = {}) : backoff_(backoff) {}

  // How long `address` must still wait (zero: not at all).
  Millis wait_for(const std::string& address, Clock::time_point now) const;
  // A wrong or missing token from `address`: grows its delay.
  void record_failure(const std::string& address, Clock::time_point now);
  // An answer to a wrong token held because wait_for() was not zero.
  void record_delayed(const std::string& address);
  // Counts since the last call.
  Summary take_summary();
  std::size_t peers() const { return peers_.size(); }

 private:
  struct Peer {
    std::uint32_t failures = 0;
    Clock::time_point last_failure;
    Clock::time_point blocked_until;
  };
  void make_room(Clock::time_point now);
  void count(const std::string& address);

  AuthBackoff backoff_;
  std::unordered_map<std::string, Peer> peers_;
  std::unordered_map<std::string, std::uint64_t> period_counts_;
  Summary period_;
};

}  // namespace ddp::store::server
