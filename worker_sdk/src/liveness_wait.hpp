// Waits inside the SDK that are not a hang of the worker's: the members of a
// re-form waiting for one another (docs/reform.md). A worker that heartbeats
// (ddp::heartbeat, docs/agent-liveness.md) keeps doing so while it waits, so
// that --heartbeat_timeout judges only the rank that never comes.
#pragma once

namespace ddp::detail {

// A heartbeat, only if the worker sent one before: a program that never
// heartbeats is not put under the heartbeat timeout by a wait of the SDK's.
void heartbeat_while_waiting() noexcept;

}  // namespace ddp::detail
