// How many store connections fit in the daemon's descriptors. Past
// max_connections a client is closed at once with a warning; past
// RLIMIT_NOFILE accept() fails and the client waits in the listen backlog,
// and the metrics port cannot accept either. So the default max_connections
// is lowered to what the descriptor limit leaves, and a value set by the
// operator that does not fit is kept with a warning.
#pragma once

#include <cstdint>

#include "daemon_config.hpp"

namespace ddp::rendezvousd {

struct DescriptorBudget {
  std::uint64_t limit = 0;        // RLIMIT_NOFILE (soft) after raising it
  std::uint64_t in_use = 0;       // descriptors open when measured
  std::uint64_t reserved = 0;     // kept for the daemon's own files and the metrics port
  std::uint64_t connections = 0;  // store connections that fit
};

// Raises the soft RLIMIT_NOFILE to the hard one (what LimitNOFILE= or
// `ulimit -Hn` allows), then counts what is left for store connections.
DescriptorBudget measure_descriptors(bool metrics_port);

// Applies the budget to settings.server.max_connections and logs what it did.
// ConfigError when no store connection fits at all.
void fit_max_connections(DaemonSettings& settings, const DescriptorBudget& budget);

}  // namespace ddp::rendezvousd
