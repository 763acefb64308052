// --heartbeat_timeout, --section_timeouts, --auto_timeout_factor and
// --auto_timeout_warmup (and the --straggler_* flags) into the agent's
// LivenessConfig.
#pragma once

#include "ddp/agent/liveness_config.hpp"
#include "ddp/launcher/launch_options.hpp"

namespace ddp::launcher {

// Throws ConfigError naming the flag.
agent::LivenessConfig translate_liveness(const LaunchOptions& o);

}  // namespace ddp::launcher
