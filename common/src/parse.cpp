#include "ddp/common/parse.hpp"

#include <cmath>
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
  if (!v) detail::throw_not(what, text, "a boolean (true/false, 1/0, yes/no, on/off)");
  return *v;
}

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text, TimeUnit unit) noexcept {
  // strtod's spelling as the flags took it before, less its locale and hex
  // forms: an optional '+', digits, fraction, exponent.
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double v = -1;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v, std::chars_format::general);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(v) || v < 0) return std::nullopt;
  const double ms = unit == TimeUnit::kSeconds ? v * 1000.0 : v;
  if (ms > static_cast<double>(kMaxDuration.count())) return std::nullopt;
  const auto rounded = std::chrono::milliseconds(std::llround(ms));
  return ms > 0 && rounded.count() == 0 ? std::chrono::milliseconds(1) : rounded;
}

std::chrono::milliseconds parse_duration_or_throw(std::string_view text, TimeUnit unit,
                                                  std::string_view what) {
  const auto v = parse_duration(text, unit);
  if (!v) {
    detail::throw_not(
        what, text,
        unit == TimeUnit::kSeconds ? "a number of seconds >= 0" : "a number of milliseconds >= 0");
  }
  return *v;
}

}  // namespace ddp
