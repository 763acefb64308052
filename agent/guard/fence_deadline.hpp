// The guard's side of the fence backstop (guard_protocol.hpp has the file's
// layout, docs/rendezvous.md "Fencing" the why): the deadline the agent keeps
// moving while the store answers it, read straight from the shared mapping.
//
// Thread-safety: one owner (the guard is single-threaded).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ddp::guard {

class FenceDeadline {
 public:
  // Maps `path`; without one (empty, or it cannot be opened) there is never a deadline.
  explicit FenceDeadline(const std::string& path);
  ~FenceDeadline();
  FenceDeadline(const FenceDeadline&) = delete;
  FenceDeadline& operator=(const FenceDeadline&) = delete;

  // How long until the deadline passes (zero once it has); negative when
  // there is none.
  std::chrono::milliseconds left() const;

 private:
  const std::int64_t* map_ = nullptr;
};

}  // namespace ddp::guard
