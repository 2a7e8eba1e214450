#include "convert.h"

#include <immintrin.h>

namespace mgo::cpu {
namespace {

bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return yes;
}

__attribute__((target("avx2,f16c"))) void load_f16_f16c(const Half* src, float* dst, std::ptrdiff_t n) {
  std::ptrdiff_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i].bits);
}

__attribute__((target("avx2,f16c"))) void store_f16_f16c(const float* src, Half* dst, std::ptrdiff_t n) {
  std::ptrdiff_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i].bits = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

void load_f16_portable(const Half* src, float* dst, std::ptrdiff_t n) {
  for (std::ptrdiff_t i = 0; i < n; ++i) {
    _Float16 h;
    std::memcpy(&h, &src[i].bits, sizeof h);
    dst[i] = static_cast<float>(h);
  }
}

void store_f16_portable(const float* src, Half* dst, std::ptrdiff_t n) {
  for (std::ptrdiff_t i = 0; i < n; ++i) {
    const _Float16 h = static_cast<_Float16>(src[i]);
    std::memcpy(&dst[i].bits, &h, sizeof h);
  }
}

}  // namespace

void load_f16(const Half* src, float* dst, std::ptrdiff_t n) {
  has_f16c() ? load_f16_f16c(src, dst, n) : load_f16_portable(src, dst, n);
}

void store_f16(const float* src, Half* dst, std::ptrdiff_t n) {
  has_f16c() ? store_f16_f16c(src, dst, n) : store_f16_portable(src, dst, n);
}

// Integer-only loops: the compiler vectorises them for each clone.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void load_bf16(const BFloat16* src, float* dst, std::ptrdiff_t n) {
  const uint16_t* s = &src->bits;
  uint32_t* d = reinterpret_cast<uint32_t*>(dst);
  for (std::ptrdiff_t i = 0; i < n; ++i) d[i] = static_cast<uint32_t>(s[i]) << 16;
}

// Round to nearest even; a NaN keeps a set quiet bit so it cannot round to infinity. (AVX512-BF16's
// vcvtneps2bf16 would be one instruction, but it flushes float32 denormals to zero.)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void store_bf16(const float* src, BFloat16* dst, std::ptrdiff_t n) {
  const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
  uint16_t* d = &dst->bits;
  for (std::ptrdiff_t i = 0; i < n; ++i) {
    const uint32_t u = s[i];
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    d[i] = static_cast<uint16_t>(nan ? ((u >> 16) | 0x40u) : rounded);
  }
}

}  // namespace mgo::cpu
