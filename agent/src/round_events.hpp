// What the rendezvous said of the rounds, kept for the agent's decisions and
// lines: the event that decided the current stop ("restart_requested: node n1
// reported a failure: ..."), the store-lost detail for the exit line, and an
// event of a round not delivered yet (another node's workers failed while
// this one waited out the fence), acted on once that round starts.
//
// Thread-safety: the io thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ddp/rdzv/rendezvous.hpp"

namespace ddp::agent {

class RoundEvents {
 public:
  struct Early {
    std::int64_t round = 0;
    rdzv::RoundEvent event{};
    std::string detail;
  };

  // The event that decides a stop, as "<event name>: <detail>".
  void decided(rdzv::RoundEvent e, const std::string& detail) {
    last_ = std::string(rdzv::event_name(e)) + (detail.empty() ? "" : ": ") + detail;
  }
  const std::string& last() const { return last_; }
  void store_lost(const std::string& detail) { store_lost_ = detail; }
  const std::string& store_lost() const { return store_lost_; }

  // Keeps an event of `round`, not delivered yet; false when one is kept already.
  bool defer(std::int64_t round, rdzv::RoundEvent e, const std::string& detail) {
    if (early_) return false;
    early_ = Early{round, e, detail};
    return true;
  }
  // The kept event of `round`, once; none for another round.
  std::optional<Early> take(std::int64_t round) {
    if (!early_ || early_->round != round) return std::nullopt;
    std::optional<Early> out = std::move(early_);
    early_.reset();
    return out;
  }
  void forget() { early_.reset(); }

 private:
  std::string last_;
  std::string store_lost_;
  std::optional<Early> early_;
};

}  // namespace ddp::agent
