#include "daemon_config.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ddp/common/error.hpp"

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
  if (s.source.rfind("flag ", 0) == 0) return s.source.substr(5);
  if (s.source.rfind("env ", 0) == 0) return s.source.substr(4);
  if (s.source.rfind("file ", 0) == 0) return s.source.substr(5) + " key " + s.key;
  return "default of " + s.key;
}

std::int64_t to_int(const Setting& s, std::int64_t lo, std::int64_t hi) {
  std::int64_t v = 0;
  const auto* first = s.value.data();
  const auto* last = first + s.value.size();
  auto [p, ec] = std::from_chars(first, last, v);
  if (s.value.empty() || ec != std::errc() || p != last || v < lo || v > hi) {
    throw ConfigError(where(s) + ": '" + s.value + "' is not an integer in " + std::to_string(lo) + ".." +
                      std::to_string(hi));
  }
  return v;
}

}  // namespace

DaemonConfig::DaemonConfig() {
  settings_ = {
      {"host", "address to listen on (store and metrics)", "0.0.0.0"},
      {"port", "store TCP port; 0 picks a free one (see --port-file)", "29400"},
      {"port_file", "write the bound port here once listening", ""},
      {"token_file", "require clients to present the token in this file", ""},
      {"data_dir", "keep a snapshot and log here; restarts keep every key", ""},
      {"max_connections", "refuse connections beyond this many", "65536"},
      {"idle_frame_timeout_ms", "close clients that send no HELLO, or stall mid-frame, this long", "30000"},
      {"torch_legacy_protocol",
       "TCPStore clients that open without VALIDATE are torch '1' (1.x) or torch '2.0' (2.0-2.1)", "1"},
      {"history_max_bytes", "keep at most this many key+value bytes of past events for watches", "67108864"},
      {"max_buffered_request_bytes", "drop a client that takes all clients' incomplete requests past this",
       "268435456"},
      {"log_level", "trace, debug, info, warn, error or off", "info"},
      {"metrics_port", "serve /metrics and /healthz on this port; 0 picks one; unset: off", ""},
      {"metrics_port_file", "write the bound metrics port here once listening", ""},
  };
}

Setting& DaemonConfig::at(const std::string& key) {
  for (auto& s : settings_) {
    if (s.key == key) return s;
  }
  throw InternalError("unknown setting " + key);
}

std::string DaemonConfig::env_name(const std::string& key) {
  std::string out = "DDP_RENDEZVOUSD_";
  for (char c : key) out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

void DaemonConfig::apply_env() {
  for (auto& s : settings_) {
    const auto name = env_name(s.key);
    if (const char* v = std::getenv(name.c_str()); v != nullptr) {
      s.value = v;
      s.source = "env " + name;
    }
  }
}

void DaemonConfig::apply_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("--config " + path + ": cannot read: " + errno_text(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  const auto text = ss.str();
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    throw ConfigError("--config " + path + ":" + std::to_string(line_of(text, e.byte == 0 ? 0 : e.byte - 1)) +
                      ": malformed JSON: " + what);
  }
  if (!doc.is_object()) throw ConfigError("--config " + path + ":1: expected a JSON object of key: value");
  for (const auto& [raw_key, value] : doc.items()) {
    std::string key = raw_key;
    std::replace(key.begin(), key.end(), '-', '_');  // "port-file" as on the command line
    const auto line = std::to_string(line_of_key(text, raw_key));
    Setting* s = nullptr;
    for (auto& candidate : settings_) {
      if (candidate.key == key) s = &candidate;
    }
    if (s == nullptr) {
      std::string known;
      for (const auto& k : settings_) known += (known.empty() ? "" : ", ") + k.key;
      throw ConfigError("--config " + path + ":" + line + ": unknown key '" + raw_key +
                        "'; known keys: " + known);
    }
    if (value.is_string()) {
      s->value = value.get<std::string>();
    } else if (value.is_number_integer()) {
      s->value = value.dump();
    } else {
      throw ConfigError("--config " + path + ":" + line + ": key '" + raw_key +
                        "' wants a string or an integer");
    }
    s->source = "file " + path + ":" + line;
  }
}

void DaemonConfig::apply_flag(const std::string& key, const std::string& value) {
  auto& s = at(key);
  s.value = value;
  s.source = "flag --" + key;
  std::replace(s.source.begin() + 5, s.source.end(), '_', '-');
}

DaemonSettings DaemonConfig::to_settings() const {
  auto get = [this](const std::string& key) -> const Setting& {
    return const_cast<DaemonConfig*>(this)->at(key);
  };
  DaemonSettings out;
  out.server.host = get("host").value;
  if (out.server.host.empty())
    throw ConfigError(where(get("host")) + ": empty; use an address such as 0.0.0.0");
  out.server.port = static_cast<std::uint16_t>(to_int(get("port"), 0, 65535));
  out.port_file = get("port_file").value;
  out.token_file = get("token_file").value;
  out.server.data_dir = get("data_dir").value;
  out.server.max_connections = static_cast<std::uint32_t>(to_int(get("max_connections"), 1, 1 << 24));
  out.server.idle_frame_timeout =
      std::chrono::milliseconds(to_int(get("idle_frame_timeout_ms"), 1, std::int64_t{24} * 3600 * 1000));
  const auto& legacy = get("torch_legacy_protocol");
  if (legacy.value == "1") {
    out.server.torch_legacy_protocol = store::TorchLegacyProtocol::kTorch1;
  } else if (legacy.value == "2.0") {
    out.server.torch_legacy_protocol = store::TorchLegacyProtocol::kTorch20;
  } else {
    throw ConfigError(where(legacy) + ": '" + legacy.value +
                      "' is not a TCPStore generation; use 1 (torch 1.x) or 2.0 (torch 2.0-2.1)");
  }
  out.server.history_max_bytes =
      static_cast<std::size_t>(to_int(get("history_max_bytes"), 1, std::int64_t{1} << 40));
  out.server.max_buffered_request_bytes = static_cast<std::size_t>(
      to_int(get("max_buffered_request_bytes"), out.server.limits.max_frame_bytes, std::int64_t{1} << 40));
  out.log_level = get("log_level").value;
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
