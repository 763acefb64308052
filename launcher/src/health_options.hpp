// The --health_* flags into the agent's HealthConfig.
#pragma once

#include "ddp/agent/health_config.hpp"
#include "ddp/launcher/launch_options.hpp"

namespace ddp::launcher {

// Throws ConfigError naming the flag.
agent::HealthConfig translate_health(const LaunchOptions& o);

}  // namespace ddp::launcher
