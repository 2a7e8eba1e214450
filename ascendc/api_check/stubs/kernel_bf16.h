// Stand-in for CANN's closed CPU-debug kernel_bf16.h: bfloat16_t (bfloat16::Bf16T) as the open
// headers use it on the CPU, in the same form as kernel_fp16.h's half. Declarations only.
#pragma once
#include <cstdint>
#include <type_traits>

struct fp4x2_e1m2_t;
struct fp4x2_e2m1_t;

namespace bfloat16 {
struct Bf16T {
  uint16_t val;
  Bf16T() = default;
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  Bf16T(T value);
  // The open headers print 4-bit floats through bfloat16.
  explicit Bf16T(fp4x2_e1m2_t value);
  explicit Bf16T(fp4x2_e2m1_t value);
  operator float() const;
  float ToFloat() const;
  template <typename T>
  Bf16T& operator+=(T value);
  template <typename T>
  Bf16T& operator-=(T value);
  template <typename T>
  Bf16T& operator*=(T value);
  template <typename T>
  Bf16T& operator/=(T value);
};
}  // namespace bfloat16
using bfloat16_t = bfloat16::Bf16T;
