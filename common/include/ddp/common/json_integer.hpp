// An integer field of outside JSON (docs/errors.md, "Outside JSON"), as T.
// nlohmann's get<int>() of a number written as 1e80 converts a double that
// does not fit, which is undefined behaviour; a value that is not an integer,
// or does not fit T, is refused here instead, as a field of the wrong type is.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <utility>

namespace ddp {

// Json is nlohmann::json (a parameter, so that this header needs only what the
// caller includes: public headers carry no full nlohmann/json).
template <typename T, typename Json>
T json_integer(const Json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.template get<std::uint64_t>();
    if (std::in_range<T>(u)) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    const auto i = v.template get<std::int64_t>();
    if (std::in_range<T>(i)) return static_cast<T>(i);
  } else {
    throw std::invalid_argument("not an integer");
  }
  throw std::out_of_range("integer out of range");
}

}  // namespace ddp
