// The collective sequence number a worker publishes in its liveness file
// (ddp/common/liveness_file.hpp, docs/agent-diagnosis.md "Who hung: the culprit rule"):
// ProcessGroup counts every collective of a group that spans the job, so the
// agent can tell the rank waiting in collective #n from the one that never
// issued it. A few relaxed stores into memory the process maps anyway: no
// system call, nothing when not under ddprun.
#pragma once

#include <cstdint>

#include "ddp/common/liveness_file.hpp"

namespace ddp::detail {

// A process group of `size` ranks was made: from now on the worker publishes
// its collectives, if `size` is the job's WORLD_SIZE. Returns whether the
// group's collectives are counted.
bool publish_collectives(int size) noexcept;
// A collective of a counted group is being issued; returns its number (from
// 1), or 0 when nothing is counted.
std::uint64_t collective_issued(liveness::CollectiveKind kind) noexcept;
// Collective `seq` (collective_issued's) completed, successfully or not.
void collective_completed(std::uint64_t seq) noexcept;

}  // namespace ddp::detail
