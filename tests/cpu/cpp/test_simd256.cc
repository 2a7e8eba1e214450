// Bitwise check of cpu/simd256.h against the scalar conversions of cpu/convert.cc: float16 and
// bfloat16 loads and round-to-nearest-even stores, on random values plus ties, denormals,
// infinities and NaNs. Exits 0 with "SKIP" on a CPU without AVX2/FMA/F16C.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/simd256.h"

namespace {

using mgo::cpu::BFloat16;
using mgo::cpu::Half;

uint32_t bits_of(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

std::vector<float> samples() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::vector<float> v;
  for (int i = 0; i < 4096; ++i) v.push_back(dist(rng));
  for (int i = 0; i < 4096; ++i) {
    const uint32_t u = any_bits(rng);
    float f = 0.0f;
    std::memcpy(&f, &u, sizeof f);
    v.push_back(f);  // every exponent, NaN payloads included
  }
  const float special[] = {0.0f, -0.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 65504.0f, 65520.0f, 1e-8f, -6e-5f,
                           std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (const float f : special) v.push_back(f);
  while (v.size() % 8 != 0) v.push_back(0.5f);
  return v;
}

__attribute__((target("avx2,fma,f16c"))) int check() {
  const std::vector<float> in = samples();
  const size_t n = in.size();
  std::vector<Half> h_ref(n), h_vec(n);
  std::vector<BFloat16> b_ref(n), b_vec(n);
  mgo::cpu::store_f16(in.data(), h_ref.data(), static_cast<std::ptrdiff_t>(n));
  mgo::cpu::store_bf16(in.data(), b_ref.data(), static_cast<std::ptrdiff_t>(n));
  for (size_t i = 0; i < n; i += 8) {
    mgo::cpu::simd256::store8(h_vec.data() + i, _mm256_loadu_ps(in.data() + i));
    mgo::cpu::simd256::store8(b_vec.data() + i, _mm256_loadu_ps(in.data() + i));
  }
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    bad += h_ref[i].bits != h_vec[i].bits;
    bad += b_ref[i].bits != b_vec[i].bits;
  }
  std::vector<float> f_ref(n), f_vec(n);
  mgo::cpu::load_f16(h_ref.data(), f_ref.data(), static_cast<std::ptrdiff_t>(n));
  for (size_t i = 0; i < n; i += 8) _mm256_storeu_ps(f_vec.data() + i, mgo::cpu::simd256::load8(h_ref.data() + i));
  for (size_t i = 0; i < n; ++i) bad += bits_of(f_ref[i]) != bits_of(f_vec[i]);
  mgo::cpu::load_bf16(b_ref.data(), f_ref.data(), static_cast<std::ptrdiff_t>(n));
  for (size_t i = 0; i < n; i += 8) _mm256_storeu_ps(f_vec.data() + i, mgo::cpu::simd256::load8(b_ref.data() + i));
  for (size_t i = 0; i < n; ++i) bad += bits_of(f_ref[i]) != bits_of(f_vec[i]);
  // reduce_add: fixed order, equal to a float sum of pair sums.
  const __m256 v = _mm256_setr_ps(1e8f, 1.0f, -1e8f, 1.0f, 3.0f, 0.5f, 0.25f, 2.0f);
  const float want = ((1e8f + 3.0f) + (-1e8f + 0.25f)) + ((1.0f + 0.5f) + (1.0f + 2.0f));
  bad += bits_of(mgo::cpu::simd256::reduce_add(v)) != bits_of(want);
  std::printf("%s: %d mismatches over %zu values\n", bad ? "FAILED" : "OK", bad, n);
  return bad ? 1 : 0;
}

}  // namespace

int main() {
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))) {
    std::printf("SKIP: no AVX2/FMA/F16C\n");
    return 0;
  }
  return check();
}
