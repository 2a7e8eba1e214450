// 16-lane float32 views of float32 / float16 / bfloat16 storage for fused AVX-512 kernels.
//
// Element-wise kernels that convert through float32 buffers spend most of their time in the
// extra passes; the fused kernels load, compute and store in registers instead. Everything in
// this header is compiled for AVX-512 (F, BW, VL) and must only be reached when
// `cpu_isa()` is Isa::kAvx512. Rounding matches convert.cc: round-to-nearest-even, quiet NaNs kept.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "convert.h"

namespace mgo::cpu {

// Which fused element-wise path this CPU takes: AVX-512 (F/BW/VL/DQ), AVX2 (+FMA, F16C), or the
// portable float32-tile path. MGO_CPU_ISA=portable or =avx2 caps it, so the tests can check the
// lower paths on the same machine.
enum class Isa { kPortable, kAvx2, kAvx512 };
Isa cpu_isa();

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")
// GCC 12's _mm512_cvtph_ps passes an undefined vector as its merge source and warns about it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace simd512 {

inline __mmask16 tail_mask(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }

inline __m512 load16(const Half* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }

inline __m512 load16(const BFloat16* p, __mmask16 m) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

inline void store16(float* p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }

inline void store16(Half* p, __m512 v, __mmask16 m) {
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

inline void store16(BFloat16* p, __m512 v, __mmask16 m) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i hi = _mm512_srli_epi32(u, 16);
  const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1)));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  const __m512i bits = _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(bits));
}

}  // namespace simd512

#pragma GCC diagnostic pop
#pragma GCC pop_options

}  // namespace mgo::cpu
