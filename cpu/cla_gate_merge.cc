// CPU AOT kernel of `cla_gate_merge` (docs/contract.md section 2):
// merged = sigmoid(z_g)[..., None] * O_g + sigmoid(z_l)[..., None] * O_l, float32 arithmetic.
#include <cmath>
#include <vector>

#include "aot.h"
#include "cla_gate_common.h"
#include "convert.h"
#include "op_kernels.h"
#include "parallel.h"
#include "simd256.h"
#include "simd512.h"

namespace mgo::cpu {
namespace {

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void merge_rows(const float* og, const float* ol, const float* sg, const float* sl, float* out, int64_t rows,
                int64_t d) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < d; ++i) out[r * d + i] = sg[r] * og[r * d + i] + sl[r] * ol[r * d + i];
  }
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")

// Fused load + merge_rows + store, in registers.
template <typename T>
void merge_rows_avx512(const T* og, const T* ol, const float* sg, const float* sl, T* out, int64_t rows, int64_t d) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t off = r * d;
    const __m512 s_g = _mm512_set1_ps(sg[r]);
    const __m512 s_l = _mm512_set1_ps(sl[r]);
    for (int64_t i = 0; i < d; i += 16) {
      const __mmask16 m = simd512::tail_mask(d - i);
      const __m512 v = _mm512_fmadd_ps(s_g, simd512::load16(og + off + i, m),
                                       _mm512_mul_ps(s_l, simd512::load16(ol + off + i, m)));
      simd512::store16(out + off + i, v, m);
    }
  }
}

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

// AVX2 twin of merge_rows_avx512; the tail of each row (d % 8) is scalar.
template <typename T>
void merge_rows_avx2(const T* og, const T* ol, const float* sg, const float* sl, T* out, int64_t rows, int64_t d) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t off = r * d;
    const __m256 s_g = _mm256_set1_ps(sg[r]);
    const __m256 s_l = _mm256_set1_ps(sl[r]);
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) {
      const __m256 v = _mm256_fmadd_ps(s_g, simd256::load8(og + off + i), _mm256_mul_ps(s_l, simd256::load8(ol + off + i)));
      simd256::store8(out + off + i, v);
    }
    for (; i < d; ++i) {
      const float v = std::fma(sg[r], to_float(og[off + i]), sl[r] * to_float(ol[off + i]));
      store(&v, out + off + i, 1);
    }
  }
}

#pragma GCC pop_options

template <typename T>
void merge(const aot::KernelArgs& args) {
  using In = table::ClaGateMerge::In;
  const T* og = args.as<const T>(In::kGlobalAttn);
  const T* ol = args.as<const T>(In::kLocalAttn);
  const T* zg = args.as<const T>(In::kGlobalGateLogits);
  const T* zl = args.as<const T>(In::kLocalGateLogits);
  T* out = args.as<T>(table::ClaGateMerge::OutParam::kMerged);
  const int64_t d = args.dim(In::kGlobalAttn, 2);
  const int64_t rows = args.numel(In::kGlobalGateLogits);
  const int64_t block = cla_rows_per_block(d);
  const int64_t n_blocks = (rows + block - 1) / block;
  const Isa isa = cpu_isa();
#pragma omp parallel if (worth_parallel(rows * d))
  {
    const int64_t tile = isa != Isa::kPortable ? 0 : block * d;  // float32 tiles for the portable path only
    std::vector<float> a(tile), b(tile), sg(block), sl(block);
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < n_blocks; ++blk) {
      const int64_t r0 = blk * block;
      const int64_t nr = std::min(block, rows - r0);
      for (int64_t r = 0; r < nr; ++r) {
        sg[r] = sigmoid(to_float(zg[r0 + r]));
        sl[r] = sigmoid(to_float(zl[r0 + r]));
      }
      if (isa == Isa::kAvx512) {
        merge_rows_avx512(og + r0 * d, ol + r0 * d, sg.data(), sl.data(), out + r0 * d, nr, d);
        continue;
      }
      if (isa == Isa::kAvx2) {
        merge_rows_avx2(og + r0 * d, ol + r0 * d, sg.data(), sl.data(), out + r0 * d, nr, d);
        continue;
      }
      load(og + r0 * d, a.data(), nr * d);
      load(ol + r0 * d, b.data(), nr * d);
      merge_rows(a.data(), b.data(), sg.data(), sl.data(), a.data(), nr, d);
      store(a.data(), out + r0 * d, nr * d);
    }
  }
}

}  // namespace

void kernels::cla_gate_merge(const aot::KernelArgs& args, const table::ClaGateMerge::Attrs& /*no attributes*/) {
  dispatch_float(args.dtype(table::ClaGateMerge::In::kGlobalAttn), [&](auto tag) {
    merge<decltype(tag)>(args);
    return 0;
  });
}

}  // namespace mgo::cpu
