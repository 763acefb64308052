#include "ddp/agent/std_streams.hpp"

#include "ddp/common/error.hpp"
#include "ddp/common/parse.hpp"

namespace ddp::agent {
namespace {

// Any malformed part is reported with the whole spec.
[[noreturn]] void bad_spec(std::string_view flag, std::string_view whole) {
  throw ConfigError(std::string(flag) + ": bad value '" + std::string(whole) +
                    "'; use 0 (none), 1 (stdout), 2 (stderr), 3 (both), or a map like 0:1,1:2");
}

// One number of the spec.
int number(std::string_view text, std::string_view flag, std::string_view whole) {
  const auto value = ddp::parse_int<int>(text);
  if (!value) bad_spec(flag, whole);
  return *value;
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
    spec.all = to_std(number(text, flag, text), flag, text);
    return spec;
  }
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const auto item = rest.substr(0, comma);
    const auto colon = item.find(':');
    if (colon == std::string_view::npos) bad_spec(flag, text);
    const int lr = number(item.substr(0, colon), flag, text);
    if (lr < 0) bad_spec(flag, text);  // local ranks are >= 0
    spec.per_rank[lr] = to_std(number(item.substr(colon + 1), flag, text), flag, text);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
    if (rest.empty()) bad_spec(flag, text);  // trailing comma
  }
  return spec;
}

}  // namespace ddp::agent
