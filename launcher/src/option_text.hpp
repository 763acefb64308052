// Small helpers for flags whose values are parsed by hand (lists, "auto").
#pragma once

#include <string>

namespace ddp::launcher {

// `s` without leading and trailing spaces and tabs.
inline std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

}  // namespace ddp::launcher
