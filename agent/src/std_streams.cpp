#include "ddp/agent/std_streams.hpp"

#include <charconv>

#include "ddp/common/error.hpp"

namespace ddp::agent {
namespace {

int parse_int(std::string_view text, std::string_view flag, std::string_view whole) {
  int value = -1;
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    throw ConfigError(std::string(flag) + ": bad value '" + std::string(whole) +
                      "'; use 0 (none), 1 (stdout), 2 (stderr), 3 (both), or a map like 0:1,1:2");
  }
  return value;
}

Std to_std(int value, std::string_view flag, std::string_view whole) {
  if (value < 0 || value > 3) {
    throw ConfigError(std::string(flag) + ": bad value '" + std::string(whole) +
                      "'; stream values are 0 (none), 1 (stdout), 2 (stderr), 3 (both)");
  }
  return static_cast<Std>(value);
}

}  // namespace

Std StdSpec::for_rank(int local_rank) const {
  if (per_rank.empty()) return all;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? Std::kNone : it->second;
}

bool StdSpec::any() const {
  if (all != Std::kNone) return true;
  for (const auto& [lr, s] : per_rank) {
    if (s != Std::kNone) return true;
  }
  return false;
}

StdSpec parse_std_spec(std::string_view text, std::string_view flag) {
  StdSpec spec;
  if (text.find(':') == std::string_view::npos) {
    spec.all = to_std(parse_int(text, flag, text), flag, text);
    return spec;
  }
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const auto item = rest.substr(0, comma);
    const auto colon = item.find(':');
    if (colon == std::string_view::npos) parse_int("", flag, text);  // throws
    const int lr = parse_int(item.substr(0, colon), flag, text);
    if (lr < 0) parse_int("", flag, text);  // throws: local ranks are >= 0
    spec.per_rank[lr] = to_std(parse_int(item.substr(colon + 1), flag, text), flag, text);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
    if (rest.empty()) parse_int("", flag, text);  // trailing comma
  }
  return spec;
}

}  // namespace ddp::agent
