// Time arithmetic on numbers that come from outside ddp: flags, env variables,
// config files, a worker's FileTimer requests and liveness file, store
// requests, API arguments. std::chrono durations are plain integers: a sum or a
// product past their range, a conversion to a finer unit (seconds -> ms -> ns)
// or a double past int64 is signed overflow, undefined, and in practice a wrap
// to a deadline in the past ("-9223372036813 ms after the deadline"). Every
// computation that takes such a number goes through these functions, which
// saturate instead.
//
// Header-only: ddp-guard, which links no ddp library, uses them too.
#pragma once

#include <chrono>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <ratio>
#include <type_traits>

namespace ddp {

// The unit a bare number of a duration is counted in: each flag, variable or
// key documents its own (--rdzv_conf timeouts are seconds, the daemon's
// idle_frame_timeout_ms is milliseconds).
enum class TimeUnit : std::uint8_t { kMilliseconds, kSeconds };

// The longest duration ddp keeps: 2^40 ms, about 34.8 years. Longer than any
// job, and far enough inside int64 nanoseconds (292 years) that now +
// kMaxDuration, or a sum of a few of them, cannot overflow.
inline constexpr std::chrono::milliseconds kMaxDuration{std::int64_t{1} << 40};
// kMaxDuration in whole seconds, as the error messages state the bound.
inline constexpr std::int64_t kMaxDurationSeconds = kMaxDuration.count() / 1000;

// a + b and a * b, or the type's max() (min()) where the result is past its range.
template <std::integral T>
constexpr T saturating_add(T a, T b) noexcept {
  T out{};
  if (!__builtin_add_overflow(a, b, &out)) return out;
  return b < T{0} ? std::numeric_limits<T>::min() : std::numeric_limits<T>::max();
}
template <std::integral T>
constexpr T saturating_mul(T a, T b) noexcept {
  T out{};
  if (!__builtin_mul_overflow(a, b, &out)) return out;
  return (a < T{0}) != (b < T{0}) ? std::numeric_limits<T>::min() : std::numeric_limits<T>::max();
}

// duration_cast<To>(d), or To::max() (min()) where the value does not fit;
// NaN is zero. Truncates toward zero like duration_cast.
template <class To, class Rep, class Period>
constexpr To saturating_cast(std::chrono::duration<Rep, Period> d) noexcept {
  using Factor = std::ratio_divide<Period, typename To::period>;
  using T = typename To::rep;
  static_assert(std::is_integral_v<T>, "saturating_cast converts to integer durations");
  if constexpr (std::is_floating_point_v<Rep>) {
    if (std::isnan(d.count())) return To::zero();
    const long double v = static_cast<long double>(d.count()) * Factor::num / Factor::den;
    if (v >= static_cast<long double>(std::numeric_limits<T>::max())) return To::max();
    if (v <= static_cast<long double>(std::numeric_limits<T>::min())) return To::min();
    return To(static_cast<T>(v));
  } else {
    const auto scaled = saturating_mul<std::intmax_t>(static_cast<std::intmax_t>(d.count()), Factor::num);
    if (scaled == std::numeric_limits<std::intmax_t>::max() && Factor::num != 1) return To::max();
    if (scaled == std::numeric_limits<std::intmax_t>::min() && Factor::num != 1) return To::min();
    const std::intmax_t v = scaled / Factor::den;
    if (v > static_cast<std::intmax_t>(std::numeric_limits<T>::max())) return To::max();
    if (v < static_cast<std::intmax_t>(std::numeric_limits<T>::min())) return To::min();
    return To(static_cast<T>(v));
  }
}

// t + d, or the time point's max() (min()) where that is past its range: a
// deadline that far ahead never comes.
template <class Clock, class Dur, class Rep, class Period>
constexpr std::chrono::time_point<Clock, Dur> saturating_add(std::chrono::time_point<Clock, Dur> t,
                                                             std::chrono::duration<Rep, Period> d) noexcept {
  using Point = std::chrono::time_point<Clock, Dur>;
  const Dur step = saturating_cast<Dur>(d);
  typename Dur::rep out{};
  if (!__builtin_add_overflow(t.time_since_epoch().count(), step.count(), &out)) return Point(Dur(out));
  return step.count() < 0 ? Point::min() : Point::max();
}

// Any duration as milliseconds in 0..kMaxDuration: negative is 0, longer is kMaxDuration.
template <class Rep, class Period>
constexpr std::chrono::milliseconds clamp_duration(std::chrono::duration<Rep, Period> d) noexcept {
  const auto ms = saturating_cast<std::chrono::milliseconds>(d);
  if (ms.count() < 0) return std::chrono::milliseconds(0);
  return ms > kMaxDuration ? kMaxDuration : ms;
}

// d * n in 0..kMaxDuration (a negative factor gives 0).
constexpr std::chrono::milliseconds clamp_product(std::chrono::milliseconds d, std::int64_t n) noexcept {
  return clamp_duration(std::chrono::milliseconds(saturating_mul<std::int64_t>(d.count(), n)));
}

// `value` of `unit` as milliseconds rounded to the nearest when it is a
// number in 0..kMaxDuration; a value above zero is at least 1 ms, so it never
// reads as "no time". nullopt for NaN, a negative value, or one past
// kMaxDuration (infinity included): for inputs where that is a user's mistake.
inline std::optional<std::chrono::milliseconds> to_duration(double value, TimeUnit unit) noexcept {
  if (std::isnan(value) || value < 0) return std::nullopt;
  const double ms = unit == TimeUnit::kSeconds ? value * 1000.0 : value;
  if (!(ms <= static_cast<double>(kMaxDuration.count()))) return std::nullopt;
  const auto rounded = std::chrono::milliseconds(std::llround(ms));
  return ms > 0 && rounded.count() == 0 ? std::chrono::milliseconds(1) : rounded;
}

// The same for inputs that cannot be refused (a worker's request): NaN and
// negative values are 0, anything past kMaxDuration is kMaxDuration.
inline std::chrono::milliseconds clamp_duration(double value, TimeUnit unit) noexcept {
  if (std::isnan(value) || value <= 0) return std::chrono::milliseconds(0);
  return to_duration(value, unit).value_or(kMaxDuration);
}

}  // namespace ddp
