// HOST:PORT endpoints, as users type them on the command line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ddp {

struct Endpoint {
  std::string host;  // name or address; IPv6 without brackets
  std::uint16_t port = 0;

  // "host:port", with brackets around an IPv6 address.
  std::string to_string() const;
};

// Parses "host:port", "[v6addr]:port" or, when default_port >= 0, a bare "host".
// Throws ConfigError naming `what` (a flag or variable) on a malformed value or a
// port outside 0..65535.
Endpoint parse_endpoint(std::string_view text, std::string_view what, int default_port = -1);

// Parses a port number 0..65535; throws ConfigError naming `what`.
std::uint16_t parse_port(std::string_view text, std::string_view what);

}  // namespace ddp
