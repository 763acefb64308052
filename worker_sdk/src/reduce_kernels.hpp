// Element-wise reductions for every DataType, shared by the Gloo backend and
// the Reducer's CPU fallbacks. 16-bit floats reduce in float and round back.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "ddp/types.hpp"

namespace ddp::detail {

template <typename T>
inline constexpr bool kIsHalfLike = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename T>
inline auto widen(T v) {
  if constexpr (kIsHalfLike<T>)
    return static_cast<float>(v);
  else
    return v;
}

template <typename T, typename W>
inline T narrow(W w) {
  if constexpr (kIsHalfLike<T>)
    return T(static_cast<float>(w));
  else
    return static_cast<T>(w);
}

struct SumOp {
  template <typename W>
  static W apply(W a, W b) {
    return a + b;
  }
};
struct MinOp {
  template <typename W>
  static W apply(W a, W b) {
    return std::min(a, b);
  }
};
struct MaxOp {
  template <typename W>
  static W apply(W a, W b) {
    return std::max(a, b);
  }
};

// c[i] = op(a[i], b[i]); c may alias a or b (Gloo's reduce-function contract).
template <typename T, typename Op>
void reduce_elements(void* c_, const void* a_, const void* b_, std::size_t n) {
  auto* c = static_cast<T*>(c_);
  const auto* a = static_cast<const T*>(a_);
  const auto* b = static_cast<const T*>(b_);
  for (std::size_t i = 0; i < n; ++i) c[i] = narrow<T>(Op::apply(widen(a[i]), widen(b[i])));
}

using ReduceFn = void (*)(void*, const void*, const void*, std::size_t);

// kAvg reduces with sum; the caller divides afterwards.
template <typename T>
ReduceFn reduce_function(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return &reduce_elements<T, MinOp>;
    case ReduceOp::kMax:
      return &reduce_elements<T, MaxOp>;
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      break;
  }
  return &reduce_elements<T, SumOp>;
}

template <typename T>
void divide_elements(T* data, std::size_t n, int divisor) {
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (kIsHalfLike<T>)
      data[i] = T(static_cast<float>(data[i]) / static_cast<float>(divisor));
    else
      data[i] = static_cast<T>(data[i] / static_cast<T>(divisor));
  }
}

// Calls f(std::type_identity<T>{}) with the C++ type of `type`.
template <typename F>
decltype(auto) dispatch_type(DataType type, F&& f) {
  switch (type) {
    case DataType::kFloat32:
      return f(std::type_identity<float>{});
    case DataType::kFloat64:
      return f(std::type_identity<double>{});
    case DataType::kFloat16:
      return f(std::type_identity<Half>{});
    case DataType::kBFloat16:
      return f(std::type_identity<BFloat16>{});
    case DataType::kInt32:
      return f(std::type_identity<std::int32_t>{});
    case DataType::kInt64:
      return f(std::type_identity<std::int64_t>{});
    case DataType::kUInt8:
      break;
  }
  return f(std::type_identity<std::uint8_t>{});
}

}  // namespace ddp::detail
