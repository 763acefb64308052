#include "daemon_config.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "ddp/common/error.hpp"
#include "ddp/common/json_input.hpp"
#include "ddp/common/parse.hpp"

namespace ddp::rendezvousd {
namespace {

int line_of(const std::string& text, std::size_t offset) {
  offset = std::min(offset, text.size());
  return 1 +
         static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
}

// nlohmann reports no positions for keys; the first `"key"` followed by ':' is
// the one a human wrote (duplicates would be odd, and the last wins in JSON).
int line_of_key(const std::string& text, const std::string& key) {
  const auto quoted = "\"" + key + "\"";
  for (auto pos = text.find(quoted); pos != std::string::npos; pos = text.find(quoted, pos + 1)) {
    auto after = pos + quoted.size();
    while (after < text.size() && std::isspace(static_cast<unsigned char>(text[after]))) ++after;
    if (after < text.size() && text[after] == ':') return line_of(text, pos);
  }
  return 0;
}

std::string where(const Setting& s) {
  switch (s.kind) {
    case SourceKind::kFlag:
      return s.source.substr(std::string_view("flag ").size());
    case SourceKind::kEnv:
      return s.source.substr(std::string_view("env ").size());
    case SourceKind::kFile:
      return s.source.substr(std::string_view("file ").size()) + " key " + s.key;
    case SourceKind::kScheduler:
    case SourceKind::kDefault:
      break;
  }
  return "default of " + s.key;
}

std::int64_t to_int(const Setting& s, std::int64_t lo, std::int64_t hi) {
  return parse_int_or_throw<std::int64_t>(
      s.value, where(s), "an integer in " + std::to_string(lo) + ".." + std::to_string(hi), lo, hi);
}

// A *_ms key: a duration whose bare number counts milliseconds.
std::chrono::milliseconds to_ms(const Setting& s, std::chrono::milliseconds lo,
                                std::chrono::milliseconds hi) {
  const auto d = parse_duration(s.value, TimeUnit::kMilliseconds);
  if (!d || *d < lo || *d > hi) {
    throw ConfigError(where(s) + ": '" + s.value + "' is not a number of milliseconds in " +
                      std::to_string(lo.count()) + ".." + std::to_string(hi.count()));
  }
  return *d;
}

// Every key with its help and default: the one place a default is written.
struct Key {
  const char* key;
  const char* help;
  const char* default_value;
};
constexpr Key kKeys[] = {
    {"host", "address to listen on (store and metrics)", "0.0.0.0"},
    {"port", "store TCP port; 0 picks a free one (see --port-file)", "29400"},
    {"port_file", "write the bound port here once listening", ""},
    {"token_file", "require clients to present the token in this file", ""},
    {"data_dir", "keep a snapshot and log here; restarts keep every key", ""},
    {"fsync",
     "with data_dir: always (every acknowledged write is fsynced first, one fsync per batch; survives a "
     "power loss) or never (faster; a power loss or file system error may lose the last writes)",
     "always"},
    {"snapshot_log_bytes",
     "with data_dir: once the log of writes passes this many bytes, save the store as a new snapshot and "
     "start the log afresh",
     "67108864"},
    {"max_connections", "refuse connections beyond this many", "65536"},
    {"idle_frame_timeout_ms", "close clients that send no HELLO, or stall mid-frame, this long", "30000"},
    {"torch_legacy_protocol",
     "torch version of the TCPStore clients that open without VALIDATE: 1 (1.x), 2.0 or 2.1", "1"},
    {"history_max_bytes", "keep at most this many key+value bytes of past events for watches", "67108864"},
    {"max_buffered_request_bytes", "drop a client that takes all clients' incomplete requests past this",
     "268435456"},
    {"max_queued_reply_bytes",
     "while all clients' unread replies are past this, drop the clients holding the most, largest first",
     "268435456"},
    {"log_level", "trace, debug, info, warn, error or off", "info"},
    {"log_file", "write the log to this file (appended) instead of stderr; SIGHUP reopens it (logrotate)",
     ""},
    {"metrics_port", "serve /metrics and /healthz on this port; 0 picks one; unset: off", ""},
    {"metrics_port_file", "write the bound metrics port here once listening", ""},
    {"keep_rounds",
     "rounds of a job kept when a newer one closes; older rounds' keys are deleted; 0: keep all", "2"},
    {"reclaim_idle_jobs_ms",
     "delete a job's keys once none holds a lease and it wrote nothing for this long; 0: never", "3600000"},
};

}  // namespace

DaemonConfig::DaemonConfig() {
  for (const auto& k : kKeys) settings_.push_back({k.key, k.help, k.default_value});
}

Setting& DaemonConfig::at(const std::string& key) {
  for (auto& s : settings_) {
    if (s.key == key) return s;
  }
  throw InternalError("unknown setting " + key);
}

const Setting& DaemonConfig::at(const std::string& key) const {
  return const_cast<DaemonConfig*>(this)->at(key);
}

std::string DaemonConfig::env_name(const std::string& key) {
  std::string out = "DDP_RENDEZVOUSD_";
  for (char c : key) out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

void DaemonConfig::add_flags(const std::map<std::string, std::string>& given) {
  sources_.add(SourceKind::kFlag, [given](const std::string& key) -> std::optional<SourcedValue> {
    const auto it = given.find(key);
    if (it == given.end()) return std::nullopt;
    auto name = key;
    std::replace(name.begin(), name.end(), '_', '-');
    return SourcedValue{it->second, "flag --" + name};
  });
}

void DaemonConfig::add_env() {
  sources_.add(SourceKind::kEnv, [](const std::string& key) -> std::optional<SourcedValue> {
    const auto name = env_name(key);
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return SourcedValue{v, "env " + name};
  });
}

void DaemonConfig::add_file(const std::string& path) {
  std::optional<std::string> text;
  try {
    text = read_json_file(path, json_input::kConfigFile.max_bytes, /*regular_only=*/false);
  } catch (const JsonError& e) {
    if (e.kind() == JsonError::Kind::kUnreadable) {
      throw ConfigError("--config " + path + ": cannot read: " + e.detail());
    }
    throw ConfigError("--config " + path + " " + e.what());
  }
  if (!text) throw ConfigError("--config " + path + ": cannot read: " + errno_text(ENOENT));
  add_file_text(*text, path);
}

void DaemonConfig::add_file_text(const std::string& text, const std::string& path) {
  nlohmann::json doc;
  try {
    doc = parse_json(text, json_input::kConfigFile);
  } catch (const JsonError& e) {
    if (e.kind() != JsonError::Kind::kMalformed) throw ConfigError("--config " + path + " " + e.what());
    throw ConfigError("--config " + path + ":" +
                      std::to_string(line_of(text, e.byte() == 0 ? 0 : e.byte() - 1)) +
                      ": malformed JSON: " + e.detail());
  }
  if (!doc.is_object()) throw ConfigError("--config " + path + ":1: expected a JSON object of key: value");
  std::map<std::string, SourcedValue> values;
  for (const auto& [raw_key, value] : doc.items()) {
    std::string key = raw_key;
    std::replace(key.begin(), key.end(), '-', '_');  // "port-file" as on the command line
    const auto line = std::to_string(line_of_key(text, raw_key));
    const bool known =
        std::any_of(settings_.begin(), settings_.end(), [&key](const Setting& c) { return c.key == key; });
    if (!known) {
      std::string names;
      for (const auto& k : settings_) names += (names.empty() ? "" : ", ") + k.key;
      throw ConfigError("--config " + path + ":" + line + ": unknown key '" + raw_key +
                        "'; known keys: " + names);
    }
    SourcedValue v;
    if (value.is_string()) {
      v.value = value.get<std::string>();
    } else if (value.is_number_integer()) {
      v.value = value.dump();
    } else {
      throw ConfigError("--config " + path + ":" + line + ": key '" + raw_key +
                        "' wants a string or an integer");
    }
    v.source = "file " + path + ":" + line;
    values[key] = std::move(v);
  }
  sources_.add(SourceKind::kFile,
               [values = std::move(values)](const std::string& key) -> std::optional<SourcedValue> {
                 const auto it = values.find(key);
                 if (it == values.end()) return std::nullopt;
                 return it->second;
               });
}

void DaemonConfig::resolve() {
  std::vector<std::string> keys;
  for (const auto& s : settings_) keys.push_back(s.key);
  ConfigSources all = sources_;
  all.add(SourceKind::kDefault, [](const std::string& key) -> std::optional<SourcedValue> {
    for (const auto& k : kKeys) {
      if (k.key == key) return SourcedValue{k.default_value, "default"};
    }
    return std::nullopt;
  });
  const auto found = all.resolve(keys);
  for (auto& s : settings_) {
    const SourcedValue& v = found.at(s.key);
    s.value = v.value;
    s.source = v.source;
    s.kind = v.kind;
  }
}

DaemonSettings DaemonConfig::to_settings() const {
  auto get = [this](const std::string& key) -> const Setting& { return at(key); };
  DaemonSettings out;
  out.server.host = get("host").value;
  if (out.server.host.empty())
    throw ConfigError(where(get("host")) + ": empty; use an address such as 0.0.0.0");
  out.server.port = static_cast<std::uint16_t>(to_int(get("port"), 0, 65535));
  out.port_file = get("port_file").value;
  out.token_file = get("token_file").value;
  out.token_file_source = where(get("token_file"));
  out.server.data_dir = get("data_dir").value;
  const auto& fsync = get("fsync");
  const auto fsync_mode = store::parse_fsync_mode(fsync.value);
  if (!fsync_mode)
    throw ConfigError(where(fsync) + ": '" + fsync.value + "' is not " + store::kFsyncModeValues);
  out.server.fsync = *fsync_mode;
  out.server.snapshot_log_bytes =
      static_cast<std::uint64_t>(to_int(get("snapshot_log_bytes"), 1, std::int64_t{1} << 40));
  out.server.max_connections = static_cast<std::uint32_t>(to_int(get("max_connections"), 1, 1 << 24));
  out.max_connections_set = get("max_connections").kind != SourceKind::kDefault;
  out.server.idle_frame_timeout =
      to_ms(get("idle_frame_timeout_ms"), std::chrono::milliseconds(1), std::chrono::hours(24));
  const auto& legacy = get("torch_legacy_protocol");
  const auto legacy_protocol = store::parse_torch_legacy_protocol(legacy.value);
  if (!legacy_protocol) {
    throw ConfigError(where(legacy) + ": '" + legacy.value +
                      "' is not a torch version this setting knows; use " +
                      store::kTorchLegacyProtocolValues);
  }
  out.server.torch_legacy_protocol = *legacy_protocol;
  out.server.history_max_bytes =
      static_cast<std::size_t>(to_int(get("history_max_bytes"), 1, std::int64_t{1} << 40));
  out.server.max_buffered_request_bytes = static_cast<std::size_t>(
      to_int(get("max_buffered_request_bytes"), out.server.limits.max_frame_bytes, std::int64_t{1} << 40));
  out.server.max_queued_reply_bytes = static_cast<std::size_t>(
      to_int(get("max_queued_reply_bytes"), out.server.limits.max_frame_bytes, std::int64_t{1} << 40));
  out.server.keep_rounds = static_cast<int>(to_int(get("keep_rounds"), 0, 1000000));
  out.server.reclaim_idle_jobs =
      to_ms(get("reclaim_idle_jobs_ms"), std::chrono::milliseconds(0), std::chrono::hours(24 * 365));
  out.log_level = get("log_level").value;
  out.log_file = get("log_file").value;
  out.log_file_source = where(get("log_file"));
  if (!get("metrics_port").value.empty())
    out.metrics_port = static_cast<int>(to_int(get("metrics_port"), 0, 65535));
  out.metrics_port_file = get("metrics_port_file").value;
  if (!out.metrics_port_file.empty() && out.metrics_port < 0) {
    throw ConfigError(where(get("metrics_port_file")) + ": needs metrics_port (--metrics-port) as well");
  }
  return out;
}

void DaemonConfig::print(std::ostream& out) const {
  for (const auto& s : settings_) {
    out << std::left << std::setw(22) << s.key << " = " << std::setw(24)
        << (s.value.empty() ? std::string("(unset)") : s.value) << " (" << s.source << ")\n";
  }
}

}  // namespace ddp::rendezvousd
