#include "ddp/common/endpoint.hpp"

#include "ddp/common/error.hpp"
#include "ddp/common/parse.hpp"

namespace ddp {

std::string Endpoint::to_string() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::uint16_t parse_port(std::string_view text, std::string_view what) {
  const auto value = parse_int<std::uint16_t>(text);
  if (!value) {
    throw ConfigError(std::string(what) + ": port '" + std::string(text) + "' is not a number in 0..65535");
  }
  return *value;
}

Endpoint parse_endpoint(std::string_view text, std::string_view what, int default_port) {
  auto bad = [&](const std::string& why) {
    return ConfigError(std::string(what) + ": '" + std::string(text) + "' " + why + "; expected HOST:PORT");
  };
  Endpoint ep;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos) throw bad("has an unclosed '['");
    ep.host = std::string(text.substr(1, close - 1));
    auto rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') throw bad("has junk after ']'");
      port_text = rest.substr(1);
    }
  } else {
    auto colon = text.rfind(':');
    if (colon != std::string_view::npos && text.find(':') != colon) {
      throw bad("is an IPv6 address without brackets");
    }
    ep.host = std::string(text.substr(0, colon));  // whole text when there is no ':'
    if (colon != std::string_view::npos) port_text = text.substr(colon + 1);
  }
  if (ep.host.empty()) throw bad("has no host");
  if (port_text.empty()) {
    if (default_port < 0) throw bad("has no port");
    ep.port = static_cast<std::uint16_t>(default_port);
  } else {
    ep.port = parse_port(port_text, what);
  }
  return ep;
}

}  // namespace ddp
