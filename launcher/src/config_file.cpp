// JSON config loading for ddprun. nlohmann/json reports where a syntax error
// is but not where a key is, so a small scanner over the (already valid) text
// finds the line of each top-level key.
#include "config_file.hpp"

#include <nlohmann/json.hpp>
#include <optional>

#include "ddp/common/error.hpp"
#include "ddp/common/json_input.hpp"

namespace ddp::launcher {
namespace {

int line_of_offset(const std::string& text, std::size_t offset) {
  int line = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') ++line;
  }
  return line;
}

// Lines of the top-level object's keys, in order of appearance. The text is
// valid JSON, so strings and nesting are all that need tracking.
std::vector<std::pair<std::string, int>> top_level_keys(const std::string& text) {
  std::vector<std::pair<std::string, int>> keys;
  int depth = 0;
  int line = 1;
  bool expect_key = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
    } else if (c == '{' || c == '[') {
      ++depth;
      expect_key = (c == '{' && depth == 1);
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == ',' && depth == 1) {
      expect_key = true;
    } else if (c == '"') {
      const int start_line = line;
      std::string raw;
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\' && i + 1 < text.size()) raw += text[i++];
        raw += text[i];
      }
      if (depth == 1 && expect_key) {
        // Decode escapes the way the parser did. json-parse-ok: one string
        // literal of a file parse_json has already accepted (depth 0).
        keys.emplace_back(nlohmann::json::parse("\"" + raw + "\"").get<std::string>(), start_line);
        expect_key = false;
      }
    }
  }
  return keys;
}

std::string normalise(std::string key) {
  for (auto& c : key) {
    if (c == '-') c = '_';
  }
  return key;
}

}  // namespace

ConfigFile load_config_file(const std::string& path) {
  std::optional<std::string> text;
  try {
    // Any file, not only regular ones: `--config <(generate)` is a pipe.
    text = read_json_file(path, json_input::kConfigFile.max_bytes, /*regular_only=*/false);
  } catch (const JsonError& e) {
    if (e.kind() == JsonError::Kind::kUnreadable) {
      throw ConfigError("--config: cannot read '" + path + "': " + e.detail());
    }
    throw ConfigError("--config " + path + " " + e.what());
  }
  if (!text) throw ConfigError("--config: cannot read '" + path + "': no such file");
  return parse_config_file(*text, path);
}

ConfigFile parse_config_file(const std::string& text, const std::string& path) {
  nlohmann::json doc;
  try {
    doc = parse_json(text, json_input::kConfigFile);
  } catch (const JsonError& e) {
    if (e.kind() != JsonError::Kind::kMalformed) throw ConfigError("--config " + path + " " + e.what());
    // Keep nlohmann's text from "syntax error" on; the line is ours.
    std::string what = e.detail();
    if (const auto p = what.find("syntax error"); p != std::string::npos) what = what.substr(p);
    throw ConfigError(path + ":" + std::to_string(line_of_offset(text, e.byte() == 0 ? 0 : e.byte() - 1)) +
                      ": malformed JSON (" + what + ")");
  }
  if (!doc.is_object()) {
    throw ConfigError(path + ":1: the config must be a JSON object of flag names to values");
  }

  ConfigFile out;
  out.path = path;
  for (const auto& [key, line] : top_level_keys(text)) {
    ConfigValue v;
    v.key = key;
    v.line = line;
    const std::string name = normalise(key);
    if (out.values.count(name) != 0) {
      throw ConfigError(path + ":" + std::to_string(line) + ": key '" + key +
                        "' is set twice (first on line " + std::to_string(out.values[name].line) + ")");
    }
    // The scanner reads the same valid text the parser did; should the two
    // ever disagree on a key, that is an error in the file's terms, not an exception.
    const auto found = doc.find(key);
    if (found == doc.end()) {
      throw ConfigError(path + ":" + std::to_string(line) + ": key '" + key +
                        "' cannot be read; check its quoting");
    }
    const auto& j = *found;
    if (j.is_string()) {
      v.type = ConfigValue::Type::kString;
      v.text = j.get<std::string>();
    } else if (j.is_boolean()) {
      v.type = ConfigValue::Type::kBool;
      v.text = j.get<bool>() ? "true" : "false";
    } else if (j.is_number()) {
      v.type = ConfigValue::Type::kNumber;
      v.text = j.dump();
    } else if (j.is_array() && std::all_of(j.begin(), j.end(), [](const auto& x) { return x.is_string(); })) {
      v.type = ConfigValue::Type::kStringList;
      for (const auto& x : j) v.list.push_back(x.get<std::string>());
    } else {
      throw ConfigError(path + ":" + std::to_string(line) + ": key '" + key +
                        "' must be a string, number or boolean (\"args\": a list of strings)");
    }
    out.values.emplace(name, std::move(v));
  }
  return out;
}

}  // namespace ddp::launcher
