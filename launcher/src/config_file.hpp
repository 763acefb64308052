// ddprun --config FILE: a JSON object whose keys are ddprun's long flag names
// (either spelling) plus "program" and "args". Parsed here into plain values
// with the line each key sits on, so errors and --print-config can name it.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ddp::launcher {

struct ConfigValue {
  std::string key;  // as written in the file
  int line = 0;     // 1-based line of the key
  enum class Type { kString, kNumber, kBool, kStringList } type = Type::kString;
  std::string text;               // string, number (as written by JSON), "true"/"false"
  std::vector<std::string> list;  // kStringList ("args")
};

struct ConfigFile {
  std::string path;
  // Keyed by the name with '-' turned into '_'.
  std::map<std::string, ConfigValue> values;

  // "FILE:LINE" for --print-config and error messages.
  std::string where(const ConfigValue& v) const { return path + ":" + std::to_string(v.line); }
};

// Reads and parses `path`. Throws ConfigError with one line naming the file
// (unreadable, over json_input::kConfigFile's size or depth, malformed JSON
// with its line, not an object, a key twice, a value of the wrong kind with
// its line).
ConfigFile load_config_file(const std::string& path);
// The same for text already read from `path`.
ConfigFile parse_config_file(const std::string& text, const std::string& path);

}  // namespace ddp::launcher
