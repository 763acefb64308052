// libFuzzer target: ddprun's --config file (parse_config_file) and
// ddp-rendezvousd's (DaemonConfig::add_file_text), both within
// json_input::kConfigFile. Input: the file's bytes; the first byte picks the
// program. Findings: a crash, a sanitizer report or an exception other than
// ConfigError.
#include <cstddef>
#include <cstdint>
#include <string>

#include "config_file.hpp"
#include "daemon_config.hpp"
#include "ddp/common/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] % 2 == 0) {
      (void)ddp::launcher::parse_config_file(text, "fuzz.json");
    } else {
      ddp::rendezvousd::DaemonConfig config;
      config.add_file_text(text, "fuzz.json");
      config.resolve();
      (void)config.to_settings();
    }
  } catch (const ddp::ConfigError&) {
  }
  return 0;
}
