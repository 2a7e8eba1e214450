// float16 / bfloat16 <-> float32 conversion of contiguous runs, with run-time SIMD dispatch.
//
// Kernels load a tile into float32, compute, and store with round-to-nearest-even. No
// -march=native in a wheel: the F16C path is compiled with a target attribute and chosen at run
// time; the portable path uses the compiler's _Float16 (also round-to-nearest-even).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../infer_shape/common.h"

namespace mgo::cpu {

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

void load_f16(const Half* src, float* dst, std::ptrdiff_t n);
void store_f16(const float* src, Half* dst, std::ptrdiff_t n);
void load_bf16(const BFloat16* src, float* dst, std::ptrdiff_t n);
void store_bf16(const float* src, BFloat16* dst, std::ptrdiff_t n);

inline void load(const float* src, float* dst, std::ptrdiff_t n) { std::memcpy(dst, src, sizeof(float) * n); }
inline void load(const Half* src, float* dst, std::ptrdiff_t n) { load_f16(src, dst, n); }
inline void load(const BFloat16* src, float* dst, std::ptrdiff_t n) { load_bf16(src, dst, n); }
inline void store(const float* src, float* dst, std::ptrdiff_t n) { std::memcpy(dst, src, sizeof(float) * n); }
inline void store(const float* src, Half* dst, std::ptrdiff_t n) { store_f16(src, dst, n); }
inline void store(const float* src, BFloat16* dst, std::ptrdiff_t n) { store_bf16(src, dst, n); }

inline float to_float(float x) { return x; }
inline float to_float(Half x) {
  float f;
  load_f16(&x, &f, 1);
  return f;
}
inline float to_float(BFloat16 x) {
  const uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Calls fn(T{}) with T the storage type of `t` (float, Half or BFloat16).
template <typename Fn>
decltype(auto) dispatch_float(infer::DType t, Fn&& fn) {
  switch (t) {
    case infer::DType::kFloat16: return fn(Half{});
    case infer::DType::kBFloat16: return fn(BFloat16{});
    case infer::DType::kFloat32: return fn(float{});
    default: throw infer::TypeError(std::string("unsupported floating dtype ") + infer::dtype_name(t));
  }
}

}  // namespace mgo::cpu
