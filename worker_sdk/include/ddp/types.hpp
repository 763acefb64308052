// Element types and reduction operations understood by every backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace ddp {

enum class DataType : std::uint8_t {
  kFloat32 = 0,
  kFloat64 = 1,
  kFloat16 = 2,   // IEEE 754 binary16
  kBFloat16 = 3,  // bfloat16: the upper half of a float32
  kInt32 = 4,
  kInt64 = 5,
  kUInt8 = 6,  // raw bytes: broadcast a checkpoint, all_gather a string
};

enum class ReduceOp : std::uint8_t {
  kSum = 0,
  kAvg = 1,  // sum divided by the group size (integers: truncating division)
  kMin = 2,
  kMax = 3,
};

std::size_t element_size(DataType type);
std::string_view to_string(DataType type);
std::string_view to_string(ReduceOp op);

// 16-bit floats as storage types. Arithmetic goes through float; conversions
// round to nearest even, as CUDA's __float2half_rn and PyTorch do.
struct Half {
  std::uint16_t bits = 0;
  Half() = default;
  explicit Half(float value);
  explicit operator float() const;
};

struct BFloat16 {
  std::uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float value);
  explicit operator float() const;
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

template <typename T>
inline constexpr bool kIsCollectiveType =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
    std::is_same_v<T, BFloat16> || std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t> ||
    std::is_same_v<T, std::uint8_t>;

// The DataType of a C++ element type, at compile time.
template <typename T>
constexpr DataType dtype_of() {
  using U = std::remove_cv_t<T>;
  static_assert(kIsCollectiveType<U>,
                "collectives take float, double, ddp::Half, ddp::BFloat16, int32_t, int64_t or uint8_t");
  if constexpr (std::is_same_v<U, float>)
    return DataType::kFloat32;
  else if constexpr (std::is_same_v<U, double>)
    return DataType::kFloat64;
  else if constexpr (std::is_same_v<U, Half>)
    return DataType::kFloat16;
  else if constexpr (std::is_same_v<U, BFloat16>)
    return DataType::kBFloat16;
  else if constexpr (std::is_same_v<U, std::int32_t>)
    return DataType::kInt32;
  else if constexpr (std::is_same_v<U, std::int64_t>)
    return DataType::kInt64;
  else
    return DataType::kUInt8;
}

}  // namespace ddp
