#include "health_options.hpp"

#include <sstream>

#include "ddp/common/error.hpp"
#include "ddp/common/parse.hpp"
#include "option_text.hpp"

namespace ddp::launcher {

namespace {

// Seconds > 0 as milliseconds (at least 1 ms).
std::chrono::milliseconds positive_seconds(const std::string& text, const std::string& flag) {
  const auto d = parse_duration(trim(text), TimeUnit::kSeconds);
  if (d && d->count() > 0) return *d;
  const std::string head = flag + ": '" + text + "' ";
  if (duration_too_long(trim(text), TimeUnit::kSeconds))
    throw ConfigError(head + std::string(kDurationTooLong));
  throw ConfigError(head + "is not a number of seconds > 0");
}

}  // namespace

agent::HealthConfig translate_health(const LaunchOptions& o) {
  agent::HealthConfig c;
  c.command = trim(o.health_check);
  c.command_timeout = positive_seconds(o.health_check_timeout, "--health_check_timeout");
  std::stringstream items(o.health_paths);
  std::string item;
  while (std::getline(items, item, ',')) {
    item = trim(item);
    if (!item.empty()) c.paths.push_back(std::filesystem::absolute(item));
  }
  c.min_free_mb = parse_int_or_throw<std::uint64_t>(trim(o.health_min_free_mb), "--health_min_free_mb",
                                                    "a number of MiB >= 0");
  const std::string gpus = trim(o.health_gpus);
  c.gpus = gpus == "auto"
               ? agent::HealthConfig::kAutoGpus
               : parse_int_or_throw<int>(gpus, "--health_gpus", "auto or a number of GPUs >= 0", 0, 1 << 16);
  c.max_store_rtt = std::chrono::milliseconds(parse_int_or_throw<std::int64_t>(
      trim(o.health_store_rtt_ms), "--health_store_rtt_ms", "a number of milliseconds >= 0 (0: no bound)", 0,
      kMaxDuration.count()));
  c.max_retries =
      parse_int_or_throw<int>(trim(o.health_retries), "--health_retries", "an integer in 0..1000", 0, 1000);
  c.retry_interval = positive_seconds(o.health_retry_interval, "--health_retry_interval");
  return c;
}

}  // namespace ddp::launcher
