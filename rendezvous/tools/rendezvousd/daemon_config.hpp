// ddp-rendezvousd's settings and where each came from. Precedence, highest
// first: command-line flag > --config file > DDP_RENDEZVOUSD_<KEY> env > default.
// Every value is kept as text with its source until to_options() converts it,
// so an error can name the flag, file line or variable that holds a bad value.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "ddp/store/store_server.hpp"

namespace ddp::rendezvousd {

struct Setting {
  std::string key;  // file key and --flag name with '_' ("port_file")
  std::string help;
  std::string value;               // "" = unset
  std::string source = "default";  // default | env NAME | file PATH:LINE | flag --NAME
};

// Everything main() needs after conversion.
struct DaemonSettings {
  store::StoreServerOptions server;
  std::string port_file;
  std::string token_file;
  std::string log_level;
  int metrics_port = -1;  // -1: no metrics endpoint
  std::string metrics_port_file;
};

class DaemonConfig {
 public:
  DaemonConfig();  // every key at its default

  std::vector<Setting>& settings() { return settings_; }
  const std::vector<Setting>& settings() const { return settings_; }
  Setting& at(const std::string& key);

  // DDP_RENDEZVOUSD_<KEY upper-cased> for every key that is set in `env`.
  void apply_env();
  // A JSON object of key → string or number. Throws ConfigError naming the
  // file (and line) when it is unreadable, malformed, or has an unknown key.
  void apply_file(const std::string& path);
  void apply_flag(const std::string& key, const std::string& value);

  // Converts and validates; ConfigError names the key and its source.
  DaemonSettings to_settings() const;
  // One line per key: key = value  (source).
  void print(std::ostream& out) const;

  static std::string env_name(const std::string& key);

 private:
  std::vector<Setting> settings_;
};

}  // namespace ddp::rendezvousd
