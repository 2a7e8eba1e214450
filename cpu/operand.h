// GEMM operand types of the attention kernels (sparse_flash_attention*, lightning_indexer,
// sparse_lightning_indexer_grad_kl_loss).
//
// bfloat16 storage multiplies as raw bf16 tiles on gemm_bf16 (float32 accumulation, as Ascend's
// cube unit does) when oneDNN has a bf16 matmul for this CPU (AVX-512); otherwise, and for
// float16/float32 storage, tiles are float32 for gemm_f32. bf16 -> float32 is exact, so both
// choices compute the same products and differ only in summation order. Kernels are templates on
// <storage T, operand Op> and pick Op once per launch with with_operand().
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "convert.h"
#include "gemm.h"

namespace mgo::cpu {

// n storage elements -> operand elements.
template <typename T, typename Op>
inline void to_operand(const T* src, Op* dst, int64_t n) {
  if constexpr (std::is_same_v<Op, uint16_t>) {
    static_assert(std::is_same_v<T, BFloat16>, "raw bf16 operands come from bf16 storage only");
    std::memcpy(dst, src, sizeof(uint16_t) * n);
  } else {
    load(src, dst, n);
  }
}

// float32 -> operand elements (round-to-nearest-even for bf16).
inline void from_float(const float* src, float* dst, int64_t n) {
  if (src != dst) std::memcpy(dst, src, sizeof(float) * n);
}
inline void from_float(const float* src, uint16_t* dst, int64_t n) { store(src, reinterpret_cast<BFloat16*>(dst), n); }

// Operand elements -> float32.
inline void operand_to_float(const float* src, float* dst, int64_t n) { std::memcpy(dst, src, sizeof(float) * n); }
inline void operand_to_float(const uint16_t* src, float* dst, int64_t n) {
  load(reinterpret_cast<const BFloat16*>(src), dst, n);
}

// C = alpha op(A) op(B) + beta C on the calling thread (see gemm.h).
inline void mm(gemm::Trans ta, gemm::Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm::gemm_f32(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void mm(gemm::Trans ta, gemm::Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm::gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Calls fn(T{}, Op{}) with Op the operand type for storage T on this CPU.
template <typename T, typename Fn>
decltype(auto) with_operand(Fn&& fn) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (gemm::bf16_native()) return fn(T{}, uint16_t{});
  }
  return fn(T{}, float{});
}

}  // namespace mgo::cpu
