#include "liveness_options.hpp"

#include <cmath>
#include <sstream>

#include "ddp/common/error.hpp"
#include "ddp/common/parse.hpp"
#include "option_text.hpp"

namespace ddp::launcher {

namespace {

// Seconds > 0 as milliseconds (at least 1 ms).
std::chrono::milliseconds seconds(const std::string& text, const std::string& flag, const std::string& what) {
  const auto d = parse_duration(text, TimeUnit::kSeconds);
  if (d && d->count() > 0) return *d;
  const std::string head = flag + ": " + what + "'" + text + "' ";
  if (duration_too_long(text, TimeUnit::kSeconds)) throw ConfigError(head + std::string(kDurationTooLong));
  throw ConfigError(head + "is not a number of seconds > 0 (or auto)");
}

}  // namespace

agent::LivenessConfig translate_liveness(const LaunchOptions& o) {
  agent::LivenessConfig c;
  const std::string hb = trim(o.heartbeat_timeout);
  if (hb == "auto") {
    c.heartbeat_auto = true;
  } else if (!hb.empty() && hb != "0" && hb != "off") {
    c.heartbeat_timeout = seconds(hb, "--heartbeat_timeout", "");
  }
  std::stringstream items(o.section_timeouts);
  std::string item;
  while (std::getline(items, item, ',')) {
    item = trim(item);
    if (item.empty()) continue;
    if (item == "auto") {
      c.sections_auto = true;
      continue;
    }
    const auto eq = item.find('=');
    const std::string name = eq == std::string::npos ? "" : trim(item.substr(0, eq));
    if (eq == std::string::npos || name.empty()) {
      throw ConfigError("--section_timeouts: '" + item +
                        "' is not NAME=SECONDS, NAME=auto or auto (e.g. step=30,checkpoint=600)");
    }
    if (name.size() > 32) {
      throw ConfigError("--section_timeouts: section name '" + name + "' is longer than 32 bytes");
    }
    const std::string value = trim(item.substr(eq + 1));
    if (value == "auto") {
      c.auto_sections.insert(name);
    } else {
      c.section_timeouts[name] = seconds(value, "--section_timeouts", name + "=");
    }
  }
  if (!(o.auto_timeout_factor >= 1.0) || !std::isfinite(o.auto_timeout_factor)) {
    throw ConfigError("--auto_timeout_factor: must be a number >= 1 (default 5)");
  }
  c.auto_factor = o.auto_timeout_factor;
  if (o.auto_timeout_warmup < 1) {
    throw ConfigError("--auto_timeout_warmup: " + std::to_string(o.auto_timeout_warmup) + " must be >= 1");
  }
  c.auto_warmup = o.auto_timeout_warmup;
  if (!(o.straggler_factor == 0 || o.straggler_factor > 1.0) || !std::isfinite(o.straggler_factor)) {
    throw ConfigError("--straggler_factor: must be 0 (off) or a number > 1 (default 2)");
  }
  c.straggler_factor = o.straggler_factor;
  if (o.straggler_steps < 1) {
    throw ConfigError("--straggler_steps: " + std::to_string(o.straggler_steps) +
                      " must be >= 1 (default 10)");
  }
  c.straggler_steps = o.straggler_steps;
  if (o.straggler_action == "report") {
    c.straggler_action = agent::LivenessConfig::StragglerAction::kReport;
  } else if (o.straggler_action == "restart") {
    c.straggler_action = agent::LivenessConfig::StragglerAction::kRestart;
  } else {
    throw ConfigError("--straggler_action: '" + o.straggler_action + "' is not report or restart");
  }
  return c;
}

}  // namespace ddp::launcher
