#include "generation_store.hpp"

#include <algorithm>

#include "ddp/common/deadline.hpp"
#include "ddp/common/error.hpp"
#include "ddp/elastic_group.hpp"
#include "liveness_wait.hpp"

namespace ddp::detail {

std::string GenerationStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::string value;
  sliced(timeout, "key " + key, [&](std::chrono::milliseconds slice) { value = inner_->get(key, slice); });
  return value;
}

void GenerationStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  sliced(timeout, std::to_string(keys.size()) + " key(s)",
         [&](std::chrono::milliseconds slice) { inner_->wait(keys, slice); });
}

void GenerationStore::sliced(std::chrono::milliseconds timeout, const std::string& what,
                             const std::function<void(std::chrono::milliseconds)>& wait) {
  const Deadline deadline = Deadline::after(timeout);
  for (;;) {
    const auto slice = std::min<std::chrono::milliseconds>(kReformSlice, deadline.remaining());
    if (slice.count() > 0) {
      try {
        wait(slice);
        return;
      } catch (const TimeoutError&) {
      }
    }
    // Connecting the generation's group is part of the re-form: not a missed heartbeat.
    heartbeat_while_waiting();
    const std::int64_t now = inner_->add(key_, 0);
    if (now > g_) {
      throw MembershipChanged(g_, "membership changed: generation " + std::to_string(g_) + " ended (now " +
                                      std::to_string(now) + ") while its process group was forming");
    }
    if (deadline.expired()) {
      throw TimeoutError("timed out after " + std::to_string(timeout.count()) + " ms waiting for " + what);
    }
  }
}

}  // namespace ddp::detail
