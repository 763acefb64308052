// The fence backstop's deadline, shared with every ddp-guard of this agent
// through a small file they map (guard_protocol.hpp has the layout): the
// CLOCK_MONOTONIC time by which a guard kills its worker's tree unless the
// deadline has moved on. The rendezvous moves it after each keep-alive the
// store answers; the guards act on it even when the agent cannot (stopped,
// hung), so that a node cut off from the store never runs its workers past
// the point where the others may start a new world (docs/rendezvous.md,
// "Fencing").
//
// Thread-safety: publish() from any thread (the rendezvous' keep-alive
// thread); open() and path() on the agent's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>

namespace ddp::agent {

class FenceFile {
 public:
  FenceFile() = default;
  ~FenceFile();  // unmaps and removes the file (a guard's mapping stays valid)
  FenceFile(const FenceFile&) = delete;
  FenceFile& operator=(const FenceFile&) = delete;

  // Creates and maps `path`, holding what was published so far. False when it
  // cannot (logged): the guards then run without the backstop.
  bool open(const std::filesystem::path& path);
  void publish(std::chrono::steady_clock::time_point deadline);
  const std::string& path() const { return path_; }

 private:
  std::mutex mu_;
  std::int64_t deadline_ns_ = 0;  // 0: no deadline yet
  std::int64_t* map_ = nullptr;
  std::string path_;
};

}  // namespace ddp::agent
