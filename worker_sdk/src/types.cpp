#include "ddp/types.hpp"

#include <bit>
#include <cmath>
#include <cstring>

namespace ddp {

std::size_t element_size(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return 4;
    case DataType::kFloat64:
      return 8;
    case DataType::kFloat16:
      return 2;
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
      return 4;
    case DataType::kInt64:
      return 8;
    case DataType::kUInt8:
      return 1;
  }
  return 0;
}

std::string_view to_string(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kUInt8:
      return "uint8";
  }
  return "unknown";
}

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "unknown";
}

namespace {

// float32 -> binary16, round to nearest even (the classic bit-twiddling version
// used by CUDA's host fallback and by c10::Half).
std::uint16_t float_to_half_bits(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  std::uint32_t mag = x & 0x7fffffffu;
  if (mag >= 0x7f800000u) {  // inf or nan
    return static_cast<std::uint16_t>(sign | (mag > 0x7f800000u ? 0x7e00u : 0x7c00u));
  }
  if (mag >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (mag < 0x38800000u) {                                                    // subnormal half (or zero)
    const float abs = std::bit_cast<float>(mag);
    // Adding 0.5 moves the value into a binade where the float's mantissa LSB is
    // 2^-24, so the FPU performs the round-to-nearest-even for us.
    const float shifted = abs + 0.5f;
    return static_cast<std::uint16_t>(sign | (std::bit_cast<std::uint32_t>(shifted) - 0x3f000000u));
  }
  const std::uint32_t odd = (mag >> 13) & 1u;
  mag += 0xc8000fffu + odd;  // rebias exponent (-112 << 23) and round
  return static_cast<std::uint16_t>(sign | (mag >> 13));
}

float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace

Half::Half(float value) : bits(float_to_half_bits(value)) {}
Half::operator float() const { return half_bits_to_float(bits); }

BFloat16::BFloat16(float value) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    bits = static_cast<std::uint16_t>((x >> 16) | 0x40u);  // keep nan a quiet nan
    return;
  }
  const std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  bits = static_cast<std::uint16_t>((x + rounding) >> 16);
}
BFloat16::operator float() const { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

}  // namespace ddp
