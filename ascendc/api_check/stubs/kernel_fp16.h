// Stand-in for CANN's closed CPU-debug kernel_fp16.h: the IEEE binary16 type `half` as the open
// headers use it on the CPU (made from and turned into arithmetic values, ToFloat, compound
// assignment). Declarations only: the API check compiles with -fsyntax-only.
#pragma once
#include <cstdint>
#include <type_traits>

struct half {
  uint16_t val;
  half() = default;
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  half(T value);
  operator float() const;
  float ToFloat() const;
  template <typename T>
  half& operator+=(T value);
  template <typename T>
  half& operator-=(T value);
  template <typename T>
  half& operator*=(T value);
  template <typename T>
  half& operator/=(T value);
};
