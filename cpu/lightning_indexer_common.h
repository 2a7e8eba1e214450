// Shared by the `lightning_indexer` and `sparse_lightning_indexer_grad_kl_loss` CPU kernels:
// which keys each query row may see, GEMM operand tiles per storage dtype, and the vectorised
// element-wise loops (ReLU-weighted head sum, exp-accumulate).
//
// BSND is handled as TND with a batch per B row (seq_lengths.h): [B, S, N, D] and [B*S, N, D] have the same
// memory layout, and so do the statistics [B, 1, S1, N1] and [1, B*S1, N1] (N2 = 1).
#pragma once

#include <algorithm>
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

// Compressed keys (docs/contract.md section 9.1): `cmp_ratio` original tokens per key and, in input
// `residual_arg` (-1: none; zero-size: all 0), per batch the tokens of the last incomplete block, so the
// batch's original length is S2_b * cmp_ratio + residual[b]. The defaults are plain keys.
struct Compression {
  int64_t ratio = 1;
  int residual_arg = -1;
};

// Builds the plan from the layout and the lengths inputs (seq_lengths.h: cumulative in TND, zero-size
// = one sequence; per batch in BSND). With sparse_mode 3, local query i of a batch of S1 queries and S2
// keys sees the keys j < floor((S2 * r + residual - S1 + i + 1) / r), r = cmp.ratio (for r = 1 the
// right-down causal rule itself, j <= i + S2 - S1). Throws std::runtime_error naming `op` for bad
// length or residual values (a residual outside [0, r), or not one per batch). Call outside any
// parallel region.
RowPlan plan_rows(const char* op, const aot::KernelArgs& args, bool bsnd, int qi_arg, int ki_arg, int lens_q_arg,
                  int lens_k_arg, table::SparseMode sparse_mode, Compression cmp = {});

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

// The lightning indexer's logits I_j = sum_g w[g] relu(query_index[t, g] . key_index[j]) of one query row
// over a prefix of its keys, written once for `lightning_indexer` and `dense_lightning_indexer_softmax_lse`
// (so the dense statistics are over exactly the logits the top-k ranks). Keys come in blocks of kBlock,
// each one GEMM [Nidx, Didx] x [Didx, kBlock] (a fixed shape, so oneDNN's bf16 primitive is reused), then
// the ReLU-weighted head sum. One per thread; the key operands (keys()) are shared, read-only.
template <typename X, typename Op, typename W>
class IndexScorer {
 public:
  static constexpr int64_t kBlock = 512;

  // Key operands of the whole launch: key_index itself when its storage is the operand type,
  // else converted once into `storage`.
  static const Op* keys(const aot::KernelArgs& args, int ki_arg, int64_t count, std::vector<Op>& storage) {
    const X* raw = args.as<const X>(ki_arg);
    if constexpr (std::is_same_v<X, Op> || std::is_same_v<Op, uint16_t>) {
      return reinterpret_cast<const Op*>(raw);
    } else {
      storage.resize(static_cast<size_t>(count));
      to_operand(raw, storage.data(), count);
      return storage.data();
    }
  }

  IndexScorer(int64_t nidx, int64_t didx)
      : nidx_(nidx), didx_(didx), q_(static_cast<size_t>(nidx * didx)), k_pad_(static_cast<size_t>(kBlock * didx)),
        sx_(static_cast<size_t>(nidx * kBlock)), w_(static_cast<size_t>(nidx)) {}

  // Loads query row `qi` [Nidx, Didx] and its weights `w` [Nidx].
  void load_row(const X* qi, const W* w) {
    to_operand(qi, q_.data(), nidx_ * didx_);
    load(w, w_.data(), nidx_);
  }

  // out[j] = I_j for the `cols` <= kBlock key rows at `keys` (operands, Didx each).
  void block(const Op* keys, int64_t cols, float* out) {
    const Op* b = keys;
    if (cols < kBlock) {  // partial block: zero-padded copy keeps the GEMM shape fixed
      std::copy(b, b + cols * didx_, k_pad_.begin());
      std::fill(k_pad_.begin() + cols * didx_, k_pad_.end(), Op{});
      b = k_pad_.data();
    }
    mm(gemm::Trans::kNo, gemm::Trans::kYes, nidx_, kBlock, didx_, 1.0f, q_.data(), didx_, b, didx_, 0.0f, sx_.data(),
       kBlock);
    relu_weighted_sum(sx_.data(), kBlock, nidx_, cols, w_.data(), out);
  }

 private:
  const int64_t nidx_, didx_;
  std::vector<Op> q_, k_pad_;
  std::vector<float> sx_, w_;
};

// Token-dims product of a [tokens..., N, D] tensor (T, or B*S).
inline int64_t token_count(const aot::KernelArgs& args, int i, bool bsnd) {
  return bsnd ? args.dim(i, 0) * args.dim(i, 1) : args.dim(i, 0);
}

}  // namespace mgo::cpu
