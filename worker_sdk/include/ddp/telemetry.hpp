// Startup telemetry a worker gives its launcher. Under ddprun, the agent times
// each attempt from its rendezvous to every local worker's first step and
// reports it (--event_log "first_step", `ddp-store status`); docs/agent.md,
// "Startup times".
#pragma once

#include "ddp/init.hpp"

namespace ddp {

// Call once the first training step is done (later calls do nothing). Sets
// `<store_prefix>ddp/first_step/<rank>` in the job's store: one request per
// process and attempt. Never throws: a store error only loses the figure.
void report_first_step(const Context& ctx);

}  // namespace ddp
