// Shared by the `lightning_indexer` and `sparse_lightning_indexer_grad_kl_loss` CPU kernels:
// which keys each query row may see, GEMM operand tiles per storage dtype, and the vectorised
// element-wise loops (ReLU-weighted head sum, exp-accumulate).
//
// BSND is handled as TND with a batch per B row (seq_lengths.h): [B, S, N, D] and [B*S, N, D] have the same
// memory layout, and so do the statistics [B, 1, S1, N1] and [1, B*S1, N1] (N2 = 1).
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "../infer_shape/op_attrs.h"
#include "aot.h"
#include "convert.h"
#include "gemm.h"
#include "operand.h"

namespace mgo::cpu {

// Keys visible to every query row: global offset of its batch's keys, S2_b, and the causal limit
// (local keys [0, limit) are visible; limit <= S2_b). A BSND padding row (beyond its batch's
// query length) is not `active`: it sees no key and its sparse_indices are never read.
struct RowPlan {
  std::vector<int64_t> key_base;
  std::vector<int64_t> key_count;
  std::vector<int64_t> limit;
  std::vector<uint8_t> active;
};

// Builds the plan from the layout and the lengths inputs (seq_lengths.h: cumulative in TND, zero-size
// = one sequence; per batch in BSND). Throws std::runtime_error naming `op` for bad length values.
// Call outside any parallel region.
RowPlan plan_rows(const char* op, const aot::KernelArgs& args, bool bsnd, int qi_arg, int ki_arg, int lens_q_arg,
                  int lens_k_arg, table::SparseMode sparse_mode);

// Throws std::runtime_error naming `op` if any index of an active row is < -1 or >= S2 of its batch.
void check_sparse_indices(const char* op, const int32_t* idx, int64_t t1, int64_t k, const RowPlan& plan);

// out[j] = sum_g w[g] * max(sx[g*ld + j], 0) for j < n, summed in g order.
void relu_weighted_sum(const float* sx, int64_t ld, int64_t nidx, int64_t n, const float* w, float* out);

// acc[j] += exp(s[j] - shift) * mul for j < n (vectorised exp, ~1 ulp; exp(-inf) = 0, NaN stays NaN).
void exp_accumulate(const float* s, int64_t n, float shift, float mul, float* acc);

// out[j] = exp(s[j] - shift) for j < n; returns the sum of out in a fixed order.
float exp_shifted(const float* s, int64_t n, float shift, float* out);

// Exceptions must not leave an OpenMP region: run each unit of work through guard() and rethrow
// the first failure after the region.
class ParallelError {
 public:
  template <typename Fn>
  void guard(Fn&& fn) noexcept {
    try {
      fn();
    } catch (const std::exception& e) {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (message_.empty()) message_ = e.what();
    }
  }
  void rethrow(const char* op) const {
    if (!message_.empty()) throw std::runtime_error(std::string(op) + ": " + message_);
  }

 private:
  std::mutex mutex_;
  std::string message_;
};

// Key-major forms for the grad kernel, where sxt = key_index x query_index^T is [npad, nidx] (the
// layout whose GEMMs run fastest: the dK GEMM then reads dS untransposed):
//   out[j]       = sum_g w[g] * max(sxt[j, g], 0)                  for j < n
//   dw[g]        = sum_{j<n} di[j] * max(sxt[j, g], 0)              (in j order)
//   dst[j, g]    = di[j] * w[g] * [sxt[j, g] > 0]  for j < n, and 0 for n <= j < npad
// ([x > 0] is 1 or 0, NaN for a NaN x; a product, so NaN in di or w reaches dst as IEEE says; max
// keeps a NaN x).
void relu_weighted_sum_by_key(const float* sxt, int64_t n, int64_t nidx, const float* w, float* out);
void indexer_score_grads(const float* sxt, int64_t n, int64_t npad, int64_t nidx, const float* di, const float* w,
                         float* dw, float* dst);

inline int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Bytes of all tensors of a launch (inputs and outputs) but parameter `skip`: the yardstick for scratch memory.
int64_t io_bytes(const aot::KernelArgs& args, int skip = -1);

// Calls fn(X{}, Op{}, W{}) with X the storage dtype of parameter `x_arg` (query_index, or query),
// Op its GEMM operand type on this CPU (operand.h) and W the storage dtype of `w_arg` (weights): the
// dispatch of the three indexer kernels.
template <typename Fn>
void dispatch_indexer(const aot::KernelArgs& args, int x_arg, int w_arg, Fn&& fn) {
  dispatch_float(args.dtype(x_arg), [&](auto x_tag) {
    using X = decltype(x_tag);
    dispatch_float(args.dtype(w_arg), [&](auto w_tag) {
      return with_operand<X>([&](auto, auto op) {
        fn(x_tag, op, w_tag);
        return 0;
      });
    });
    return 0;
  });
}

// Token-dims product of a [tokens..., N, D] tensor (T, or B*S).
inline int64_t token_count(const aot::KernelArgs& args, int i, bool bsnd) {
  return bsnd ? args.dim(i, 0) * args.dim(i, 1) : args.dim(i, 0);
}

}  // namespace mgo::cpu
