// Thin single-threaded GEMM wrapper over oneDNN's C API (see cpu/gemm.cc).
#pragma once

#include <cstdint>

namespace mgo::gemm {

enum class Trans { kNo, kYes };

// Row-major. C[M,N] (float32, leading dim ldc) = alpha * op(A) * op(B) + beta * C.
// op(A) is [M,K] (A stored [M,K] with ld lda, or [K,M] with ld lda when ta == kYes);
// op(B) is [K,N] (B stored [K,N] with ld ldb, or [N,K] with ld ldb when tb == kYes).
// Always runs on the calling thread only, so the result is bitwise identical whatever
// the caller's OpenMP thread count. Re-entrant; throws std::runtime_error on failure.
// beta == 0 means C is write-only (NaNs in C are not propagated).
void gemm_f32(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
              float* c, int64_t ldc);

// Same, but A and B hold bfloat16 values as raw uint16_t; float32 accumulation/output.
// Without oneDNN bf16 support on this CPU (or with MGO_CPU_ISA=avx2/portable) the operands are
// widened to float32 first: same products, different summation order.
void gemm_bf16(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha,
               const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
               float* c, int64_t ldc);

// True when gemm_bf16 runs oneDNN's bf16 matmul on this CPU (AVX-512 and MGO_CPU_ISA is neither
// "avx2" nor "portable"); false when it widens to float32, so kernels build float32 tiles instead.
bool bf16_native();

}  // namespace mgo::gemm
