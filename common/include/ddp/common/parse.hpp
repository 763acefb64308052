// The one way ddp reads integers, booleans and durations out of text (flags,
// env variables, config file values, store values). Each comes twice: a plain
// parser returning nullopt for anything malformed (for callers with their own
// message, or none), and an `_or_throw` variant whose ConfigError is one line
// naming `what` (the flag, variable or key) and what a valid value looks like.
#pragma once

#include <charconv>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include "ddp/common/time_bounds.hpp"

namespace ddp {

// A whole-string decimal integer of type T: "42", "-3". No '+', no spaces, no
// trailing text; nullopt for those, for "", and for values outside T.
template <std::integral T = std::int64_t>
std::optional<T> parse_int(std::string_view text) noexcept {
  T v{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

namespace detail {
[[noreturn]] void throw_not(std::string_view what, std::string_view text, std::string_view expected);
}  // namespace detail

// As parse_int, and within lo..hi; else ConfigError "<what>: '<text>' is not
// <expected>" (expected says what is: "a positive integer", "an integer in 0..65535").
template <std::integral T = std::int64_t>
T parse_int_or_throw(std::string_view text, std::string_view what, std::string_view expected,
                     T lo = std::numeric_limits<T>::min(), T hi = std::numeric_limits<T>::max()) {
  const auto v = parse_int<T>(text);
  if (!v || *v < lo || *v > hi) detail::throw_not(what, text, expected);
  return *v;
}

// true for 1, true, yes, on; false for 0, false, no, off; any letter case
// ("True", "YES"). nullopt for anything else, "" included.
std::optional<bool> parse_bool(std::string_view text) noexcept;

// The spellings parse_bool reads, for messages.
inline constexpr std::string_view kBooleanSpellings = "true/false, 1/0, yes/no, on/off";

// As parse_bool; else ConfigError "<what>: '<text>' is not a boolean (true/false,
// 1/0, yes/no, on/off)".
bool parse_bool_or_throw(std::string_view text, std::string_view what);

// A duration written as a non-negative decimal number of `unit`, with an
// optional fraction and exponent ("30", "0.5", "1e3"), as milliseconds rounded
// to the nearest; a value above zero is at least 1 ms, so it never reads as
// "no time". nullopt for "", trailing text, a negative number, inf, nan, or
// more than kMaxDuration (ddp::to_duration, time_bounds.hpp).
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text, TimeUnit unit) noexcept;

// As parse_duration; else ConfigError "<what>: '<text>' is not a number of
// seconds >= 0" (or milliseconds), or, for a number past kMaxDuration,
// "<what>: '<text>' is longer than 1099511627 s (about 34 years), the longest
// duration ddp accepts".
std::chrono::milliseconds parse_duration_or_throw(std::string_view text, TimeUnit unit,
                                                  std::string_view what);

// For callers that parse a duration with rules of their own (a "> 0", an
// "auto") and word their own message: whether `text` is a number that is only
// too long (past kMaxDuration, infinity included), and what to say of it.
bool duration_too_long(std::string_view text, TimeUnit unit) noexcept;
inline constexpr std::string_view kDurationTooLong =
    "is longer than 1099511627 s (about 34 years), the longest duration ddp accepts";
static_assert(kMaxDurationSeconds == 1099511627, "kDurationTooLong states kMaxDuration");

}  // namespace ddp
