// Standalone check of cpu/gemm.cc against a naive double-precision triple loop.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "cpu/gemm.h"

namespace {

using mgo::gemm::Trans;

uint16_t to_bf16(const float f) {  // round to nearest even
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof(u));
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(const uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f = 0.0f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

struct Case {
  Trans ta, tb;
  int64_t m, n, k, pad;  // pad: extra elements per leading dim (non-contiguous)
  float alpha, beta;
};

// Returns number of failures. Operands are filled with values exactly representable in bf16,
// so the f32 and bf16 paths must both match the double reference closely.
int run_case(const Case& cs, std::mt19937& rng, const bool bf16) {
  const int64_t a_rows = cs.ta == Trans::kNo ? cs.m : cs.k;
  const int64_t a_cols = cs.ta == Trans::kNo ? cs.k : cs.m;
  const int64_t b_rows = cs.tb == Trans::kNo ? cs.k : cs.n;
  const int64_t b_cols = cs.tb == Trans::kNo ? cs.n : cs.k;
  const int64_t lda = a_cols + cs.pad, ldb = b_cols + cs.pad, ldc = cs.n + cs.pad;
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const auto fill = [&](std::vector<float>& v) {
    for (float& x : v) x = from_bf16(to_bf16(dist(rng)));
  };
  std::vector<float> a(static_cast<size_t>(a_rows * lda)), b(static_cast<size_t>(b_rows * ldb)),
      c(static_cast<size_t>(cs.m * ldc));
  fill(a);
  fill(b);
  fill(c);
  const std::vector<float> c0 = c;
  const auto at = [&](int64_t i, int64_t p) {
    return cs.ta == Trans::kNo ? a[i * lda + p] : a[p * lda + i];
  };
  const auto bt = [&](int64_t p, int64_t j) {
    return cs.tb == Trans::kNo ? b[p * ldb + j] : b[j * ldb + p];
  };
  if (bf16) {
    std::vector<uint16_t> ah(a.size()), bh(b.size());
    for (size_t i = 0; i < a.size(); ++i) ah[i] = to_bf16(a[i]);
    for (size_t i = 0; i < b.size(); ++i) bh[i] = to_bf16(b[i]);
    mgo::gemm::gemm_bf16(cs.ta, cs.tb, cs.m, cs.n, cs.k, cs.alpha, ah.data(), lda, bh.data(), ldb,
                         cs.beta, c.data(), ldc);
  } else {
    mgo::gemm::gemm_f32(cs.ta, cs.tb, cs.m, cs.n, cs.k, cs.alpha, a.data(), lda, b.data(), ldb,
                        cs.beta, c.data(), ldc);
  }
  int bad = 0;
  for (int64_t i = 0; i < cs.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t idx = static_cast<size_t>(i * ldc + j);
      if (j >= cs.n) {  // padding must be untouched
        if (std::memcmp(&c[idx], &c0[idx], sizeof(float)) != 0) ++bad;
        continue;
      }
      double acc = 0.0, mag = 0.0;
      for (int64_t p = 0; p < cs.k; ++p) {
        acc += static_cast<double>(at(i, p)) * bt(p, j);
        mag += std::fabs(static_cast<double>(at(i, p)) * bt(p, j));
      }
      const double ref = cs.alpha * acc + cs.beta * static_cast<double>(c0[idx]);
      const double tol = 1e-6 * (std::fabs(cs.alpha) * mag + std::fabs(cs.beta) + 1.0) * 4;
      if (!(std::fabs(c[idx] - ref) <= tol)) {
        if (bad < 3) {
          std::printf("  mismatch at (%ld,%ld): got %.9g want %.9g\n", static_cast<long>(i),
                      static_cast<long>(j), c[idx], ref);
        }
        ++bad;
      }
    }
  }
  return bad;
}

}  // namespace

int main() {
  // Which bf16 path this process takes (MGO_CPU_ISA and the CPU decide); the Python test checks it.
  std::printf("bf16 path: %s\n", mgo::gemm::bf16_native() ? "matmul" : "widened");
  std::mt19937 rng(12345);
  const int64_t sizes[][3] = {{1, 1, 1},   {1, 2048, 128}, {64, 1, 576}, {5, 7, 1},
                              {17, 33, 65}, {64, 576, 129}, {1, 13, 300}, {31, 1, 1},
                              {3, 129, 2}};
  const float ab[][2] = {{1.0f, 0.0f}, {0.125f, 1.0f}, {-1.5f, 0.5f}};
  int failures = 0, total = 0;
  for (const bool bf16 : {false, true}) {
    for (const auto& s : sizes) {
      for (const Trans ta : {Trans::kNo, Trans::kYes}) {
        for (const Trans tb : {Trans::kNo, Trans::kYes}) {
          for (const auto& coef : ab) {
            for (const int64_t pad : {0, 3}) {
              const Case cs{ta, tb, s[0], s[1], s[2], pad, coef[0], coef[1]};
              const int bad = run_case(cs, rng, bf16);
              ++total;
              if (bad != 0) {
                ++failures;
                std::printf("FAIL %s ta=%d tb=%d m=%ld n=%ld k=%ld pad=%ld alpha=%g beta=%g: %d\n",
                            bf16 ? "bf16" : "f32", ta == Trans::kYes, tb == Trans::kYes,
                            static_cast<long>(cs.m), static_cast<long>(cs.n),
                            static_cast<long>(cs.k), static_cast<long>(pad), cs.alpha, cs.beta,
                            bad);
              }
            }
          }
        }
      }
    }
  }
  // K == 0: C = beta * C.
  {
    std::vector<float> c(6, 2.0f);
    mgo::gemm::gemm_f32(Trans::kNo, Trans::kNo, 2, 3, 0, 1.0f, nullptr, 1, nullptr, 3, 0.5f,
                        c.data(), 3);
    ++total;
    for (const float x : c) failures += x != 1.0f;
  }
  // Bad arguments throw.
  {
    bool threw = false;
    try {
      float c = 0.0f;
      mgo::gemm::gemm_f32(Trans::kNo, Trans::kNo, 1, 4, 1, 1.0f, &c, 1, &c, 1, 0.0f, &c, 1);
    } catch (const std::runtime_error& e) {
      threw = true;
      std::printf("expected error: %s\n", e.what());
    }
    ++total;
    failures += !threw;
  }
  // Same result bitwise whether called from 1 thread or from each of N OpenMP threads.
  {
    const int64_t m = 64, n = 576, k = 777;
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> a(m * k), b(k * n);
    std::vector<uint16_t> ah(m * k), bh(k * n);
    for (size_t i = 0; i < a.size(); ++i) ah[i] = to_bf16(a[i] = dist(rng));
    for (size_t i = 0; i < b.size(); ++i) bh[i] = to_bf16(b[i] = dist(rng));
    std::vector<float> ref32(m * n), ref16(m * n);
    mgo::gemm::gemm_f32(Trans::kNo, Trans::kNo, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f,
                        ref32.data(), n);
    mgo::gemm::gemm_bf16(Trans::kNo, Trans::kNo, m, n, k, 1.0f, ah.data(), k, bh.data(), n, 0.0f,
                         ref16.data(), n);
    int mismatch = 0;
#pragma omp parallel num_threads(4) reduction(+ : mismatch)
    {
      std::vector<float> c32(m * n), c16(m * n);
      for (int rep = 0; rep < 3; ++rep) {
        mgo::gemm::gemm_f32(Trans::kNo, Trans::kNo, m, n, k, 1.0f, a.data(), k, b.data(), n,
                            0.0f, c32.data(), n);
        mgo::gemm::gemm_bf16(Trans::kNo, Trans::kNo, m, n, k, 1.0f, ah.data(), k, bh.data(), n,
                             0.0f, c16.data(), n);
        mismatch += std::memcmp(c32.data(), ref32.data(), c32.size() * sizeof(float)) != 0;
        mismatch += std::memcmp(c16.data(), ref16.data(), c16.size() * sizeof(float)) != 0;
      }
    }
    ++total;
    if (mismatch != 0) {
      ++failures;
      std::printf("FAIL determinism across threads: %d mismatching runs\n", mismatch);
    }
  }
  std::printf("%s: %d/%d cases failed\n", failures ? "FAILED" : "OK", failures, total);
  return failures ? 1 : 0;
}
