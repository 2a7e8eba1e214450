// CPU AOT kernel of `cla_gate_backward` (docs/contract.md section 2):
// dO_g = G*s_g, dO_l = G*s_l, dz_g = (sum_d G*O_g) * s_g * (1 - s_g), likewise dz_l, with s
// recomputed in float32 and the D-sum in float32 per (token, head) row; s * (1 - s) is evaluated
// as s * sigmoid(-z) (no cancellation for large z).
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

// In place: og <- G*s_g, ol <- G*s_l; dot_g/dot_l <- per-row sum_d G*O. The `omp simd`
// reduction lets the compiler vectorise the sums; their order depends only on the clone picked
// for this CPU, never on the thread count, so results stay bitwise reproducible.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void backward_rows(const float* g, float* og, float* ol, const float* sg, const float* sl, float* dot_g, float* dot_l,
                   int64_t rows, int64_t d) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* gr = g + r * d;
    float* a = og + r * d;
    float* b = ol + r * d;
    float acc_g = 0.0f;
    float acc_l = 0.0f;
#pragma omp simd reduction(+ : acc_g, acc_l)
    for (int64_t i = 0; i < d; ++i) {
      acc_g += gr[i] * a[i];
      acc_l += gr[i] * b[i];
    }
    const float s_g = sg[r];
    const float s_l = sl[r];
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) {
      a[i] = gr[i] * s_g;
      b[i] = gr[i] * s_l;
    }
    dot_g[r] = acc_g;
    dot_l[r] = acc_l;
  }
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")

// Fused version of load + backward_rows + store: one pass over G, O_g, O_l in registers. The
// per-row dot products reduce their 16 lanes in a fixed order (bitwise reproducible).
template <typename T>
void backward_rows_avx512(const T* g, const T* og, const T* ol, const float* sg, const float* sl, T* d_og, T* d_ol,
                          float* dot_g, float* dot_l, int64_t rows, int64_t d) {
  using simd512::load16;
  using simd512::store16;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t off = r * d;
    const __m512 s_g = _mm512_set1_ps(sg[r]);
    const __m512 s_l = _mm512_set1_ps(sl[r]);
    __m512 acc_g = _mm512_setzero_ps();
    __m512 acc_l = _mm512_setzero_ps();
    for (int64_t i = 0; i < d; i += 16) {
      const __mmask16 m = simd512::tail_mask(d - i);
      const __m512 gv = load16(g + off + i, m);
      acc_g = _mm512_fmadd_ps(gv, load16(og + off + i, m), acc_g);
      acc_l = _mm512_fmadd_ps(gv, load16(ol + off + i, m), acc_l);
      store16(d_og + off + i, _mm512_mul_ps(gv, s_g), m);
      store16(d_ol + off + i, _mm512_mul_ps(gv, s_l), m);
    }
    dot_g[r] = _mm512_reduce_add_ps(acc_g);
    dot_l[r] = _mm512_reduce_add_ps(acc_l);
  }
}

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

// AVX2 twin of backward_rows_avx512; the tail of each row (d % 8) is scalar and added after the
// 8 lanes, in a fixed order.
template <typename T>
void backward_rows_avx2(const T* g, const T* og, const T* ol, const float* sg, const float* sl, T* d_og, T* d_ol,
                        float* dot_g, float* dot_l, int64_t rows, int64_t d) {
  using simd256::load8;
  using simd256::store8;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t off = r * d;
    const __m256 s_g = _mm256_set1_ps(sg[r]);
    const __m256 s_l = _mm256_set1_ps(sl[r]);
    __m256 acc_g = _mm256_setzero_ps();
    __m256 acc_l = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) {
      const __m256 gv = load8(g + off + i);
      acc_g = _mm256_fmadd_ps(gv, load8(og + off + i), acc_g);
      acc_l = _mm256_fmadd_ps(gv, load8(ol + off + i), acc_l);
      store8(d_og + off + i, _mm256_mul_ps(gv, s_g));
      store8(d_ol + off + i, _mm256_mul_ps(gv, s_l));
    }
    float tail_g = 0.0f;
    float tail_l = 0.0f;
    for (; i < d; ++i) {
      const float gi = to_float(g[off + i]);
      tail_g = std::fma(gi, to_float(og[off + i]), tail_g);
      tail_l = std::fma(gi, to_float(ol[off + i]), tail_l);
      const float a = gi * sg[r];
      const float b = gi * sl[r];
      store(&a, d_og + off + i, 1);
      store(&b, d_ol + off + i, 1);
    }
    dot_g[r] = simd256::reduce_add(acc_g) + tail_g;
    dot_l[r] = simd256::reduce_add(acc_l) + tail_l;
  }
}

#pragma GCC pop_options

template <typename T>
void backward(const aot::KernelArgs& args) {
  using In = table::ClaGateBackward::In;
  using OutParam = table::ClaGateBackward::OutParam;
  const T* g = args.as<const T>(In::kGradMerged);
  const T* og = args.as<const T>(In::kGlobalAttn);
  const T* ol = args.as<const T>(In::kLocalAttn);
  const T* zg = args.as<const T>(In::kGlobalGateLogits);
  const T* zl = args.as<const T>(In::kLocalGateLogits);
  T* d_og = args.as<T>(OutParam::kGradGlobalAttn);
  T* d_ol = args.as<T>(OutParam::kGradLocalAttn);
  T* d_zg = args.as<T>(OutParam::kGradGlobalGateLogits);
  T* d_zl = args.as<T>(OutParam::kGradLocalGateLogits);
  const int64_t d = args.dim(In::kGlobalAttn, 2);
  const int64_t rows = args.numel(In::kGlobalGateLogits);
  const int64_t block = cla_rows_per_block(d);
  const int64_t n_blocks = (rows + block - 1) / block;
  const Isa isa = cpu_isa();
#pragma omp parallel if (worth_parallel(rows * d))
  {
    // Float32 tiles for the portable path only.
    const int64_t tile = isa != Isa::kPortable ? 0 : block * d;
    std::vector<float> gt(tile), a(tile), b(tile);
    std::vector<float> sg(block), sl(block), dot_g(block), dot_l(block);
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < n_blocks; ++blk) {
      const int64_t r0 = blk * block;
      const int64_t nr = std::min(block, rows - r0);
      for (int64_t r = 0; r < nr; ++r) {
        sg[r] = sigmoid(to_float(zg[r0 + r]));
        sl[r] = sigmoid(to_float(zl[r0 + r]));
      }
      if (isa == Isa::kAvx512) {
        backward_rows_avx512(g + r0 * d, og + r0 * d, ol + r0 * d, sg.data(), sl.data(), d_og + r0 * d, d_ol + r0 * d,
                             dot_g.data(), dot_l.data(), nr, d);
      } else if (isa == Isa::kAvx2) {
        backward_rows_avx2(g + r0 * d, og + r0 * d, ol + r0 * d, sg.data(), sl.data(), d_og + r0 * d, d_ol + r0 * d,
                           dot_g.data(), dot_l.data(), nr, d);
      } else {
        load(g + r0 * d, gt.data(), nr * d);
        load(og + r0 * d, a.data(), nr * d);
        load(ol + r0 * d, b.data(), nr * d);
        backward_rows(gt.data(), a.data(), b.data(), sg.data(), sl.data(), dot_g.data(), dot_l.data(), nr, d);
        store(a.data(), d_og + r0 * d, nr * d);
        store(b.data(), d_ol + r0 * d, nr * d);
      }
      for (int64_t r = 0; r < nr; ++r) {
        dot_g[r] *= sigmoid_slope(to_float(zg[r0 + r]));
        dot_l[r] *= sigmoid_slope(to_float(zl[r0 + r]));
      }
      store(dot_g.data(), d_zg + r0, nr);
      store(dot_l.data(), d_zl + r0, nr);
    }
  }
}

}  // namespace

void kernels::cla_gate_backward(const aot::KernelArgs& args, const table::ClaGateBackward::Attrs& /*TND only*/) {
  dispatch_float(args.dtype(table::ClaGateBackward::In::kGradMerged), [&](auto tag) {
    backward<decltype(tag)>(args);
    return 0;
  });
}

}  // namespace mgo::cpu
