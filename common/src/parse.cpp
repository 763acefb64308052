#include "ddp/common/parse.hpp"

#include <cmath>
#include <cstdlib>
#include <string>

#include "ddp/common/error.hpp"

namespace ddp {
namespace {

bool equals_lower(std::string_view text, std::string_view lower) {
  if (text.size() != lower.size()) return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i] >= 'A' && text[i] <= 'Z' ? static_cast<char>(text[i] - 'A' + 'a') : text[i];
    if (c != lower[i]) return false;
  }
  return true;
}

}  // namespace

namespace detail {

void throw_not(std::string_view what, std::string_view text, std::string_view expected) {
  throw ConfigError(std::string(what) + ": '" + std::string(text) + "' is not " + std::string(expected));
}

}  // namespace detail

std::optional<bool> parse_bool(std::string_view text) noexcept {
  for (std::string_view yes : {"1", "true", "yes", "on"}) {
    if (equals_lower(text, yes)) return true;
  }
  for (std::string_view no : {"0", "false", "no", "off"}) {
    if (equals_lower(text, no)) return false;
  }
  return std::nullopt;
}

bool parse_bool_or_throw(std::string_view text, std::string_view what) {
  const auto v = parse_bool(text);
  if (!v) detail::throw_not(what, text, "a boolean (" + std::string(kBooleanSpellings) + ")");
  return *v;
}

namespace {

// strtod's spelling as the flags took it before, less its locale and hex
// forms: an optional '+', digits, fraction, exponent (and "inf"). nullopt for
// anything else, nan included; a number past double's range is infinity.
std::optional<double> parse_number(std::string_view text) noexcept {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v, std::chars_format::general);
  if (text.empty() || ptr != end || std::isnan(v)) return std::nullopt;
  if (ec == std::errc::result_out_of_range) {
    // from_chars leaves v unset on overflow and on underflow alike; strtod
    // gives infinity for the one and zero (or a denormal) for the other.
    return std::strtod(std::string(text).c_str(), nullptr);
  }
  if (ec != std::errc()) return std::nullopt;
  return v;
}

}  // namespace

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text, TimeUnit unit) noexcept {
  const auto v = parse_number(text);
  if (!v || std::isinf(*v)) return std::nullopt;
  return to_duration(*v, unit);
}

bool duration_too_long(std::string_view text, TimeUnit unit) noexcept {
  const auto v = parse_number(text);
  return v && *v > 0 && !to_duration(*v, unit);
}

std::chrono::milliseconds parse_duration_or_throw(std::string_view text, TimeUnit unit,
                                                  std::string_view what) {
  const auto v = parse_duration(text, unit);
  if (v) return *v;
  // A number, only too large: say the bound, not "is not a number".
  if (duration_too_long(text, unit)) {
    throw ConfigError(std::string(what) + ": '" + std::string(text) + "' " + std::string(kDurationTooLong));
  }
  detail::throw_not(
      what, text, unit == TimeUnit::kSeconds ? "a number of seconds >= 0" : "a number of milliseconds >= 0");
}

}  // namespace ddp
