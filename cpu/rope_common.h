// Shared by the `rope` and `rope_grad` CPU kernels: per-token positions and the per-head
// half-mixing that all three RoPE formulas reduce to.
//
// Every formula is out_lo = x_lo*A + x_hi*B, out_hi = x_hi*C + x_lo*D on the two 64-wide halves
// of each 128-wide head, with A..D built from the token's cos/sin row.
#pragma once

#include <cstdint>
#include <vector>

#include "aot.h"
#include "convert.h"
#include "parallel.h"
#include "simd256.h"
#include "simd512.h"

namespace mgo::cpu {

constexpr int64_t kRopeHead = 128;
constexpr int64_t kRopeHalf = 64;

struct HalfMix {
  float a[kRopeHalf], b[kRopeHalf], c[kRopeHalf], d[kRopeHalf];
};

// Applies `mix` in place to every head of a row of `heads` * 128 floats.
void apply_half_mix(float* row, int64_t heads, const HalfMix& mix);

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")

// Fused load + apply_half_mix + store of one row of `heads` * 128 elements, in registers.
template <typename X>
void apply_half_mix_avx512(const X* in, X* out, int64_t heads, const HalfMix& mix) {
  constexpr __mmask16 kAll = 0xFFFF;
  __m512 a[4], b[4], c[4], d[4];
  for (int j = 0; j < 4; ++j) {
    a[j] = _mm512_loadu_ps(mix.a + 16 * j);
    b[j] = _mm512_loadu_ps(mix.b + 16 * j);
    c[j] = _mm512_loadu_ps(mix.c + 16 * j);
    d[j] = _mm512_loadu_ps(mix.d + 16 * j);
  }
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t lo = h * kRopeHead;
    const int64_t hi = lo + kRopeHalf;
    for (int j = 0; j < 4; ++j) {
      const __m512 xl = simd512::load16(in + lo + 16 * j, kAll);
      const __m512 xh = simd512::load16(in + hi + 16 * j, kAll);
      simd512::store16(out + lo + 16 * j, _mm512_fmadd_ps(xh, b[j], _mm512_mul_ps(xl, a[j])), kAll);
      simd512::store16(out + hi + 16 * j, _mm512_fmadd_ps(xl, d[j], _mm512_mul_ps(xh, c[j])), kAll);
    }
  }
}

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

// AVX2 twin of apply_half_mix_avx512 (the mix stays in L1: 32 vectors do not fit 16 registers).
template <typename X>
void apply_half_mix_avx2(const X* in, X* out, int64_t heads, const HalfMix& mix) {
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t lo = h * kRopeHead;
    const int64_t hi = lo + kRopeHalf;
    for (int j = 0; j < kRopeHalf; j += 8) {
      const __m256 xl = simd256::load8(in + lo + j);
      const __m256 xh = simd256::load8(in + hi + j);
      const __m256 a = _mm256_loadu_ps(mix.a + j), b = _mm256_loadu_ps(mix.b + j);
      const __m256 c = _mm256_loadu_ps(mix.c + j), d = _mm256_loadu_ps(mix.d + j);
      simd256::store8(out + lo + j, _mm256_fmadd_ps(xh, b, _mm256_mul_ps(xl, a)));
      simd256::store8(out + hi + j, _mm256_fmadd_ps(xl, d, _mm256_mul_ps(xh, c)));
    }
  }
}

#pragma GCC pop_options

// Local position of every packed token; throws std::runtime_error naming `op` when the lengths
// are not positive, exceed max_seq_len or do not add up to n_tokens. Runs before any parallel
// region, so the exception reaches MindSpore (as a RuntimeError) instead of terminating.
std::vector<int32_t> rope_positions(const char* op, const aot::KernelArgs& args, int lens_index, int64_t n_tokens,
                                    int64_t max_seq_len);

// Kernel parameter positions of the two ops (table::Rope / table::RopeGrad): inputs x0, x1
// [T, hidden], cos, sin [max_seq_len, 128], q_seq_len [B]; outputs y0, y1 like x0.
struct RopeSlots {
  int x0, x1, cos, sin, lens, y0, y1;
};

// Runs `make_mix(cos_row, sin_row, mix)` per token and applies it to x0 and x1, writing y0 and y1.
template <typename MakeMix>
void run_rope_family(const char* op, const aot::KernelArgs& args, const RopeSlots& slots, MakeMix make_mix) {
  const int64_t n_tokens = args.dim(slots.x0, 0);
  const int64_t hidden = args.dim(slots.x0, 1);
  const int64_t heads = hidden / kRopeHead;
  const std::vector<int32_t> pos = rope_positions(op, args, slots.lens, n_tokens, args.dim(slots.cos, 0));
  dispatch_float(args.dtype(slots.x0), [&](auto x_tag) {
    using X = decltype(x_tag);
    dispatch_float(args.dtype(slots.cos), [&](auto c_tag) {
      using C = decltype(c_tag);
      const X* x[2] = {args.as<const X>(slots.x0), args.as<const X>(slots.x1)};
      X* y[2] = {args.as<X>(slots.y0), args.as<X>(slots.y1)};
      const C* cos = args.as<const C>(slots.cos);
      const C* sin = args.as<const C>(slots.sin);
      const Isa isa = cpu_isa();
#pragma omp parallel if (worth_parallel(n_tokens * hidden))
      {
        std::vector<float> row(isa != Isa::kPortable ? 0 : static_cast<size_t>(hidden));  // portable path only
        float c_row[kRopeHead], s_row[kRopeHead];
        HalfMix mix;
#pragma omp for schedule(static)
        for (int64_t t = 0; t < n_tokens; ++t) {
          load(cos + pos[t] * kRopeHead, c_row, kRopeHead);
          load(sin + pos[t] * kRopeHead, s_row, kRopeHead);
          make_mix(c_row, s_row, mix);
          for (int k = 0; k < 2; ++k) {
            if (isa == Isa::kAvx512) {
              apply_half_mix_avx512(x[k] + t * hidden, y[k] + t * hidden, heads, mix);
              continue;
            }
            if (isa == Isa::kAvx2) {
              apply_half_mix_avx2(x[k] + t * hidden, y[k] + t * hidden, heads, mix);
              continue;
            }
            load(x[k] + t * hidden, row.data(), hidden);
            apply_half_mix(row.data(), heads, mix);
            store(row.data(), y[k] + t * hidden, hidden);
          }
        }
      }
      return 0;
    });
    return 0;
  });
}

}  // namespace mgo::cpu
