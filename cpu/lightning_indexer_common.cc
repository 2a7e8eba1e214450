#include "lightning_indexer_common.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "cann_strict.h"
#include "seq_lengths.h"

// The selects in these loops compare floats, and under the default -ftrapping-math GCC will not
// if-convert a comparison that may raise FE_INVALID, so the AVX2 clones stayed scalar. Nothing here
// reads the floating-point exception flags.
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")

// Included under the pragma, so vmath::exp compiles with this file's options and inlines here.
#include "vector_math.h"

namespace mgo::cpu {
namespace {

// max(x, 0) keeping NaN (std::max would not be inlined under this file's optimize pragma).
inline float relu(float x) { return x < 0.0f ? 0.0f : x; }

// [x > 0] as a factor: a NaN di or w must reach ds as NaN even where x <= 0 (NaN * 0 = NaN, as the
// reference computes it), and a NaN x gives NaN.
inline float relu_step(float x) {
  const float step = x > 0.0f ? 1.0f : 0.0f;
  return x != x ? x : step;
}

// Fixed-lane partial sums: vectorisable, and the same order on every call.
constexpr int64_t kLanes = 16;

inline float lane_sum(const float (&lanes)[kLanes]) {
  float sum = 0.0f;
  for (float v : lanes) sum += v;
  return sum;
}

}  // namespace

namespace {

// The residual of every batch (docs/contract.md section 9.1): all 0 when the input is absent.
std::vector<int64_t> read_residuals(const char* op, const aot::KernelArgs& args, Compression cmp, int64_t batches) {
  std::vector<int64_t> res(static_cast<size_t>(batches), 0);
  if (cmp.residual_arg < 0 || args.numel(cmp.residual_arg) == 0) return res;
  const int i = cmp.residual_arg;
  if (args.numel(i) != batches) {
    throw std::runtime_error(std::string(op) + ": cmp_residual_k must have one entry per batch (" +
                             std::to_string(batches) + "), got " + std::to_string(args.numel(i)));
  }
  for (int64_t b = 0; b < batches; ++b) {
    res[b] = args.dtype(i) == infer::DType::kInt64 ? args.as<const int64_t>(i)[b] : args.as<const int32_t>(i)[b];
    if (res[b] < 0 || res[b] >= cmp.ratio) {
      throw std::runtime_error(std::string(op) + ": cmp_residual_k[" + std::to_string(b) + "] = " +
                               std::to_string(res[b]) + " must be in [0, cmp_ratio = " + std::to_string(cmp.ratio) +
                               ") (the original tokens of the last incomplete block)");
    }
  }
  return res;
}

}  // namespace

RowPlan plan_rows(const char* op, const aot::KernelArgs& args, bool bsnd, int qi_arg, int ki_arg, int lens_q_arg,
                  int lens_k_arg, table::SparseMode sparse_mode, Compression cmp) {
  const int64_t t1 = token_count(args, qi_arg, bsnd);
  const int64_t t2 = token_count(args, ki_arg, bsnd);
  const Batches bat = read_batches(op, args, bsnd, bsnd ? args.dim(qi_arg, 0) : 0, t1, t2, lens_q_arg, lens_k_arg,
                                   "actual_seq_lengths_key");
  const std::vector<int64_t> residual = read_residuals(op, args, cmp, bat.count());
  RowPlan plan{std::vector<int64_t>(t1), std::vector<int64_t>(t1), std::vector<int64_t>(t1),
               std::vector<uint8_t>(t1)};
  const int64_t r = cmp.ratio;
  for (int64_t b = 0; b < bat.count(); ++b) {
    const int64_t q0 = bat.q0[b], k0 = bat.kv0[b];
    const int64_t s1 = bat.q_len[b], s2 = bat.kv_len[b];
    for (int64_t i = 0; i < s1; ++i) {
      plan.key_base[q0 + i] = k0;
      plan.key_count[q0 + i] = s2;
      // Tokens the row sees in original positions; floor division (0 for none). r = 1, residual 0:
      // i + s2 - s1 + 1, the right-down causal rule, the same integers as before cmp_ratio existed.
      const int64_t seen = s2 * r + residual[b] - s1 + i + 1;
      plan.limit[q0 + i] = sparse_mode == table::SparseMode::kRightDownCausal
                               ? std::clamp<int64_t>(seen > 0 ? seen / r : 0, 0, s2)
                               : s2;
      plan.active[q0 + i] = 1;
    }
  }
  return plan;
}

int64_t io_bytes(const aot::KernelArgs& args, int skip) {
  int64_t total = 0;
  for (int i = 0; i < args.count(); ++i) {
    if (i == skip) continue;
    const infer::DType t = args.dtype(i);
    const int64_t size = t == infer::DType::kFloat16 || t == infer::DType::kBFloat16 ? 2
                         : t == infer::DType::kInt64 || t == infer::DType::kFloat64 ? 8
                         : t == infer::DType::kBool ? 1
                                                     : 4;
    total += args.numel(i) * size;
  }
  return total;
}

void check_sparse_indices(const char* op, const int32_t* idx, int64_t t1, int64_t k, const RowPlan& plan) {
  const bool strict = cann_strict();
  std::vector<int32_t> seen;
  for (int64_t t = 0; t < t1; ++t) {
    if (!plan.active[t]) continue;  // a BSND padding row: never read
    for (int64_t s = 0; s < k; ++s) {
      const int32_t v = idx[t * k + s];
      if (v < -1 || v >= plan.key_count[t]) {
        throw std::runtime_error(std::string(op) + ": sparse_indices value " + std::to_string(v) + " at query row " +
                                 std::to_string(t) + ", slot " + std::to_string(s) + " is out of range [-1, " +
                                 std::to_string(plan.key_count[t]) + ") (S2 of its batch)");
      }
    }
    if (strict) check_cann_row(op, idx + t * k, k, std::min(k, plan.limit[t]), t, 0, seen);
  }
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void relu_weighted_sum(const float* __restrict sx, int64_t ld, int64_t nidx, int64_t n, const float* __restrict w,
                       float* __restrict out) {
  for (int64_t j = 0; j < n; ++j) out[j] = 0.0f;
  for (int64_t g = 0; g < nidx; ++g) {
    const float wg = w[g];
    const float* row = sx + g * ld;
    for (int64_t j = 0; j < n; ++j) out[j] += wg * relu(row[j]);
  }
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void exp_accumulate(const float* __restrict s, int64_t n, float shift, float mul, float* __restrict acc) {
  for (int64_t j = 0; j < n; ++j) acc[j] += vmath::exp(s[j] - shift) * mul;
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
float exp_shifted(const float* __restrict s, int64_t n, float shift, float* __restrict out) {
  for (int64_t j = 0; j < n; ++j) out[j] = vmath::exp(s[j] - shift);
  float lanes[kLanes] = {};
  const int64_t n_main = n / kLanes * kLanes;
  for (int64_t j0 = 0; j0 < n_main; j0 += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += out[j0 + l];
  }
  for (int64_t j = n_main; j < n; ++j) lanes[j - n_main] += out[j];
  return lane_sum(lanes);
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void relu_weighted_sum_by_key(const float* __restrict sxt, int64_t n, int64_t nidx, const float* __restrict w,
                              float* __restrict out) {
  const int64_t g_main = nidx / kLanes * kLanes;
  for (int64_t j = 0; j < n; ++j) {
    const float* row = sxt + j * nidx;
    float lanes[kLanes] = {};
    for (int64_t g0 = 0; g0 < g_main; g0 += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) lanes[l] += w[g0 + l] * relu(row[g0 + l]);
    }
    for (int64_t g = g_main; g < nidx; ++g) lanes[g - g_main] += w[g] * relu(row[g]);
    out[j] = lane_sum(lanes);
  }
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void indexer_score_grads(const float* __restrict sxt, int64_t n, int64_t npad, int64_t nidx,
                         const float* __restrict di, const float* __restrict w, float* __restrict dw,
                         float* __restrict dst) {
  for (int64_t g = 0; g < nidx; ++g) dw[g] = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float* row = sxt + j * nidx;
    float* out = dst + j * nidx;
    const float d = di[j];
    for (int64_t g = 0; g < nidx; ++g) {
      const float x = row[g];
      dw[g] += d * relu(x);
      out[g] = d * w[g] * relu_step(x);
    }
  }
  for (int64_t i = n * nidx; i < npad * nidx; ++i) dst[i] = 0.0f;
}

}  // namespace mgo::cpu

#pragma GCC pop_options
