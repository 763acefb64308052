// Heartbeats and sections: how a worker tells ddprun it is making progress
// (docs/agent-liveness.md, "Heartbeats and sections"; docs/worker-sdk.md).
//
//   ddp::heartbeat();                       // "still alive", e.g. once per step
//   { ddp::Section s("step"); train_step(); }  // a scope with its own timeout
//
// ddprun kills a worker that misses --heartbeat_timeout after its first
// heartbeat, or stays in a section longer than its --section_timeouts entry,
// and restarts the job like after a failure. Without ddprun (DDP_LIVENESS_FILE
// unset) both do nothing. Neither throws, allocates after the first use of a
// name, or makes a system call unless ddprun asked to hear about the change.
#pragma once

#include <cstdint>
#include <string_view>

namespace ddp {

// True when this process runs under ddprun with a liveness file.
bool liveness_enabled() noexcept;

// Records a heartbeat. Safe from any thread; under a microsecond.
void heartbeat() noexcept;

// A named section for the lifetime of the object ("setup", "step",
// "checkpoint", or any name; the first 32 bytes count, at most 16 distinct
// names per worker). Sections nest: the inner one is the current one, and on
// its exit the outer one is current again with its clock restarted. Use one
// thread's sections at a time (usually the training loop's).
class Section {
 public:
  explicit Section(std::string_view name) noexcept;
  ~Section();
  Section(const Section&) = delete;
  Section& operator=(const Section&) = delete;

 private:
  std::uint32_t slot_ = 0;
  std::uint32_t outer_slot_ = 0;
  std::uint64_t enter_ns_ = 0;
  bool active_ = false;
};

}  // namespace ddp
