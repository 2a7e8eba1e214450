// The one exp of the CPU kernels' vectorised loops (lightning indexer, sparse flash attention), for
// a float or a GCC vector of floats (V8): Cody-Waite reduction and the Cephes expf polynomial,
// ~1 ulp. Every special case is a select, so a loop of the float form auto-vectorises (under
// -fno-trapping-math) and the V8 form has no branch: x < -87.3 and -inf give 0, x > 88.7 gives inf
// (so does x > ~88.38, where 2^n overflows), NaN stays NaN.
//
// always_inline: every target_clones clone and every optimize-pragma region compiles its own copy
// (GCC does not inline across differing optimize options otherwise).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

namespace mgo::cpu::vmath {

// 8 float32 lanes as a GCC vector (one ymm in the AVX2 and AVX-512 clones, two xmm in the default
// one), and its int32 twin of the same size. (Every use is inlined into a clone, so the psabi note
// on passing such vectors is moot.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
using V8 = float __attribute__((vector_size(32)));
using V8i = int32_t __attribute__((vector_size(32)));

template <typename F>
struct Lanes;  // F's int32 twin
template <>
struct Lanes<float> {
  using Int = int32_t;
};
template <>
struct Lanes<V8> {
  using Int = V8i;
};

// `value` in every lane of F.
template <typename F>
[[gnu::always_inline]] inline F splat(float value) {
  return F{} + value;
}

template <typename F>
[[gnu::always_inline]] inline F exp(const F& x) {
  using I = typename Lanes<F>::Int;
  static_assert(sizeof(F) == sizeof(I));
  constexpr float kInf = std::numeric_limits<float>::infinity();
  F xc = x < -87.5f ? splat<F>(-87.5f) : x;  // NaN compares false: stays NaN
  xc = xc > 88.5f ? splat<F>(88.5f) : xc;
  // n = round(x / ln 2) by the 1.5 * 2^23 rounding constant; its low bits are n (no float->int
  // conversion, which would be undefined for NaN).
  const F kn = xc * 1.44269504088896341f + 12582912.0f;
  const F n = kn - 12582912.0f;
  const F r = (xc - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  F p = splat<F>(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  I kbits;
  std::memcpy(&kbits, &kn, sizeof kbits);
  const I bits = (kbits - 0x4b400000 + 127) << 23;
  F scale;
  std::memcpy(&scale, &bits, sizeof scale);
  F y = p * scale;
  y = x < -87.3f ? splat<F>(0.0f) : y;
  y = x > 88.7f ? splat<F>(kInf) : y;
  return x != x ? x : y;
}

}  // namespace mgo::cpu::vmath

#pragma GCC diagnostic pop
