// 8-lane float32 views of float32 / float16 / bfloat16 storage for the fused AVX2 kernels (the
// AVX2 twin of simd512.h, for CPUs without AVX-512). Compiled for AVX2 + FMA + F16C and only
// reached when cpu_isa() is Isa::kAvx2. Rounding matches convert.cc: round-to-nearest-even,
// quiet NaNs kept. Full 8-lane vectors only; callers finish tails with the scalar helpers.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "convert.h"

namespace mgo::cpu {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace simd256 {

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }

inline __m256 load8(const Half* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

inline __m256 load8(const BFloat16* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

inline void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }

inline void store8(Half* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

inline void store8(BFloat16* p, __m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i hi = _mm256_srli_epi32(u, 16);
  const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(hi, _mm256_set1_epi32(1)));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  const __m256i bits = _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
  // 8 x u32 (each <= 0xffff) -> 8 x u16: packus works per 128-bit lane, so fix the lane order.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}

// Sum of the 8 lanes in a fixed order.
inline float reduce_add(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

}  // namespace simd256

#pragma GCC pop_options

}  // namespace mgo::cpu
