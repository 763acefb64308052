// Where a program's settings come from, in precedence order: an ordered list
// of sources (command line, config file, env, Slurm, defaults), highest first.
// For each key the first source that has a value wins, and the value keeps the
// name of the place it was found, so a later error can say which flag, file
// line or variable to fix, and the kind of its source, so that code can tell a
// command-line value apart without reading that name. ddprun and ddp-rendezvousd both resolve
// their settings through one of these; a new source (a scheduler's env) is one
// more add(), not another code path.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddp {

// What kind of place a value came from.
enum class SourceKind : std::uint8_t { kFlag, kFile, kEnv, kScheduler, kDefault };

struct SourcedValue {
  std::string value;
  // Where it was found, as errors and --print-config show it: "flag --port",
  // "env DDP_RENDEZVOUSD_PORT", "file /etc/d.json:3", "slurm", "default".
  std::string source;
  // Set by resolve() from the source that gave the value.
  SourceKind kind = SourceKind::kDefault;
};

// Not thread-safe: built and resolved once, at startup.
class ConfigSources {
 public:
  // The value this source has for `key`, if any. May throw ConfigError.
  using Lookup = std::function<std::optional<SourcedValue>(const std::string& key)>;
  // Runs once per resolve(), before the source is first asked, with what the
  // sources above it resolved: for a source whose values depend on those (the
  // Slurm env fills only what the user left unset).
  using Prepare = std::function<void(const std::map<std::string, SourcedValue>& above)>;

  // Appends a source below every source added before it.
  void add(SourceKind kind, Lookup lookup, Prepare prepare = nullptr);

  // For each of `keys`, the value of the first source that has one, its kind
  // set to that source's; keys no source has are absent. Sources are asked in
  // order, each only for the keys still unresolved.
  std::map<std::string, SourcedValue> resolve(const std::vector<std::string>& keys) const;

 private:
  struct Source {
    SourceKind kind;
    Lookup lookup;
    Prepare prepare;
  };
  std::vector<Source> sources_;
};

}  // namespace ddp
