// ddp-rendezvousd's settings and where each came from. Precedence, highest
// first: command-line flag > --config file > --config-if-exists file >
// DDP_RENDEZVOUSD_<KEY> env > default: a ddp::ConfigSources list that main()
// fills in that order. Every value is kept as text with its source until
// to_settings() converts it, so an error can name the flag, file line or
// variable that holds a bad value.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "ddp/common/config_sources.hpp"
#include "ddp/store/store_server.hpp"

namespace ddp::rendezvousd {

struct Setting {
  std::string key;  // file key and --flag name with '_' ("port_file")
  std::string help;
  std::string value;               // "" = unset
  std::string source = "default";  // default | env NAME | file PATH:LINE | flag --NAME
  SourceKind kind = SourceKind::kDefault;
};

// Everything main() needs after conversion.
struct DaemonSettings {
  store::StoreServerOptions server;
  bool max_connections_set = false;  // by a flag, file or variable, not the default
  std::string port_file;
  std::string token_file;
  std::string token_file_source;  // the flag, variable or file line that named it, for errors
  std::string log_level;
  std::string log_file;         // empty: stderr
  std::string log_file_source;  // the flag, variable or file line that named it
  int metrics_port = -1;        // -1: no metrics endpoint
  std::string metrics_port_file;
};

class DaemonConfig {
 public:
  DaemonConfig();  // every key at its default

  const std::vector<Setting>& settings() const { return settings_; }
  const Setting& at(const std::string& key) const;

  // The sources, added highest precedence first; resolve() then takes each
  // key from the first that has it, else its default.
  // Values given on the command line, by key ("port_file").
  void add_flags(const std::map<std::string, std::string>& given);
  // A JSON object of key → string or number, read now. Throws ConfigError
  // naming the file (and line) when it is unreadable, over
  // json_input::kConfigFile's size or depth, malformed, or has an unknown key.
  void add_file(const std::string& path);
  // The same for text already read from `path`.
  void add_file_text(const std::string& text, const std::string& path);
  // DDP_RENDEZVOUSD_<KEY upper-cased> from the process env.
  void add_env();
  void resolve();

  // Converts and validates; ConfigError names the key and its source.
  DaemonSettings to_settings() const;
  // One line per key: key = value  (source).
  void print(std::ostream& out) const;

  static std::string env_name(const std::string& key);

 private:
  Setting& at(const std::string& key);

  std::vector<Setting> settings_;
  ConfigSources sources_;  // without the defaults, which resolve() adds below them
};

}  // namespace ddp::rendezvousd
