#include "ddp/types.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

using ddp::BFloat16;
using ddp::Half;

TEST_CASE("half converts known values exactly") {
  CHECK(Half(1.0f).bits == 0x3c00);
  CHECK(Half(-2.0f).bits == 0xc000);
  CHECK(Half(65504.0f).bits == 0x7bff);
  CHECK(Half(65520.0f).bits == 0x7c00);        // rounds to infinity
  CHECK(Half(5.9604645e-08f).bits == 0x0001);  // smallest subnormal
  CHECK(static_cast<float>(Half(0.1f)) == Approx(0.0999755859375f));
  CHECK(std::isnan(static_cast<float>(Half(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("half rounds to nearest even") {
  // 2049 lies exactly between 2048 and 2050 (spacing 2): ties go to the even mantissa.
  CHECK(static_cast<float>(Half(2049.0f)) == 2048.0f);
  CHECK(static_cast<float>(Half(2051.0f)) == 2052.0f);
}

TEST_CASE("every half value survives a round trip through float") {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    Half h;
    h.bits = static_cast<std::uint16_t>(b);
    const float f = static_cast<float>(h);
    if (std::isnan(f)) continue;
    REQUIRE(Half(f).bits == h.bits);
  }
}

TEST_CASE("bfloat16 keeps the upper half of a float with round to nearest even") {
  CHECK(BFloat16(1.0f).bits == 0x3f80);
  CHECK(static_cast<float>(BFloat16(3.0f)) == 3.0f);
  CHECK(BFloat16(1.00390625f).bits == 0x3f80);  // tie -> even
  CHECK(BFloat16(1.01171875f).bits == 0x3f82);  // tie -> even (up)
  CHECK(std::isnan(static_cast<float>(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("dtype_of and element_size agree") {
  CHECK(ddp::dtype_of<float>() == ddp::DataType::kFloat32);
  CHECK(ddp::dtype_of<const std::int64_t>() == ddp::DataType::kInt64);
  CHECK(ddp::element_size(ddp::dtype_of<Half>()) == 2);
  CHECK(ddp::element_size(ddp::DataType::kFloat64) == 8);
  CHECK(ddp::to_string(ddp::DataType::kBFloat16) == "bfloat16");
}
