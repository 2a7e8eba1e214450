// The backward of the lightning indexer's scores, shared by the kernels that differentiate them:
// `lightning_indexer_grad` (dI = d_values of the selected slots), `sparse_lightning_indexer_grad_kl_loss`
// and `dense_lightning_indexer_grad_kl_loss` (dI = y - p; the dense one over a row's keys in blocks).
//
// Per query row t with n selected visible keys (key rows padded to npad, a multiple of kPad, so GEMM
// shapes repeat and oneDNN's cached bf16 primitives are reused):
//   SxT = key_index x query_index^T                   [npad, Nidx] GEMM          (ScoreBackward::scores)
//   dW  = sum_j dI_j relu(SxT[j]), dST = dI * w * [SxT > 0]                      (ScoreBackward::backward)
//   d_query_index = dST^T x key_index                 [Nidx, Didx] GEMM
//   dK rows       = dST x query_index                 [npad, Didx] GEMM, added into the row's key buffer
// The index scores are kept key-major ([npad, Nidx]) so the dK GEMM reads dS untransposed: with
// dS^T as a transposed operand it ran at half the rate of the other products.
// bf16 inputs run bf16 GEMMs with float32 accumulation (dS rounded to bf16 first, as Ascend's cube
// unit does); float16/float32 inputs run float32 GEMMs.
//
// Determinism (run_rows_with_key_grads): rows are split into a fixed number of chunks (row t ->
// chunk t % C, C independent of the thread count); each chunk accumulates its rows' key gradients in
// row order into its own float32 [T2, Didx] buffer, and the buffers are summed in chunk order. Row
// outputs are owned by one row.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "../infer_shape/op_table.h"
#include "lightning_indexer_common.h"

namespace mgo::cpu {

constexpr int64_t kScorePad = 64;

// Parameter positions of the indexer tensors in a launch.
struct ScoreArgs {
  int query_index, key_index, weights, d_query_index, d_weights;
};

// The ScoreArgs of `Op` (table::LightningIndexerGrad, table::SparseLightningIndexerGradKLLoss or
// table::DenseLightningIndexerGradKLLoss: they name these tensors alike, in different slots).
template <class Op>
constexpr ScoreArgs score_args_of() {
  return {Op::In::kQueryIndex, Op::In::kKeyIndex, Op::In::kWeights, Op::OutParam::kDQueryIndex,
          Op::OutParam::kDWeights};
}

// Rows gathered ahead of the one being copied: selected key rows are scattered through memory, and
// without the hint each row's copy waits on its first cache misses.
constexpr int64_t kPrefetchRows = 4;

template <typename X>
void prefetch_row(const X* row, int64_t n) {
  const char* p = reinterpret_cast<const char*>(row);
  for (int64_t off = 0; off < n * static_cast<int64_t>(sizeof(X)); off += 64) __builtin_prefetch(p + off);
}

// Scratch and steps of the score backward of one query row at a time (one per thread). X: storage
// dtype of query_index/key_index/d_query_index, Op: GEMM operand, W: storage of weights/d_weights.
template <typename X, typename Op, typename W>
class ScoreBackward {
 public:
  // k: the slot count K (bounds n).
  ScoreBackward(const aot::KernelArgs& args, const ScoreArgs& pos, int64_t nidx, int64_t didx, int64_t k)
      : a_(args), pos_(pos), nidx_(nidx), didx_(didx) {
    const int64_t kp = round_up(k, kScorePad);
    keys_.reserve(static_cast<size_t>(k));
    qit_.resize(static_cast<size_t>(nidx * didx));
    kit_.resize(static_cast<size_t>(kp * didx));
    sx_.resize(static_cast<size_t>(nidx * kp));
    ds_.resize(static_cast<size_t>(nidx * kp));
    if constexpr (!std::is_same_v<Op, float>) ds_op_.resize(static_cast<size_t>(nidx * kp));
    w_.resize(static_cast<size_t>(nidx));
    dw_.resize(static_cast<size_t>(nidx));
    dw_block_.resize(static_cast<size_t>(nidx));
    dqi_.resize(static_cast<size_t>(nidx * didx));
    dk_.resize(static_cast<size_t>(kp * didx));
  }

  // Global key rows of the row's selected visible keys, ascending (the caller fills it; indices
  // already range-checked). Ascending rows turn the gathers and the dK scatter into forward sweeps
  // through memory instead of random row accesses.
  std::vector<int64_t>& keys() { return keys_; }
  const std::vector<int64_t>& keys() const { return keys_; }

  // SxT [rows(), Nidx] of query row t over keys() (n >= 1 of them), and the row's weights as float32.
  void scores(int64_t t) {
    using gemm::Trans;
    const int64_t n = static_cast<int64_t>(keys_.size());
    const int64_t np = round_up(n, kScorePad);
    to_operand(a_.as<const X>(pos_.query_index) + t * nidx_ * didx_, qit_.data(), nidx_ * didx_);
    // Key rows in place when they can be (then unpadded: rows past n may hold anything, even NaN),
    // else gathered and zero-padded to np.
    kit_ptr_ = rows_in_place(pos_.key_index, didx_, 0, n);
    rows_ = kit_ptr_ ? n : np;
    if (!kit_ptr_) {
      gather(a_.as<const X>(pos_.key_index), didx_, nullptr, 0, 0, n, kit_.data());
      std::fill(kit_.begin() + n * didx_, kit_.begin() + np * didx_, Op{});
      kit_ptr_ = kit_.data();
    }
    mm(Trans::kNo, Trans::kYes, rows_, nidx_, didx_, 1.0f, kit_ptr_, didx_, qit_.data(), didx_, 0.0f, sx_.data(),
       nidx_);
    load(a_.as<const W>(pos_.weights) + t * nidx_, w_.data(), nidx_);
  }

  const float* sxt() const { return sx_.data(); }
  const float* weights() const { return w_.data(); }

  // After scores(t): d_weights[t] and d_query_index[t] from dI[0, n) (n = keys().size()); the key
  // gradient rows are added into dk_acc [T2, Didx] at keys().
  void backward(int64_t t, const float* di, float* dk_acc) {
    accumulate(di, dk_acc, true);
    store_row(t);
  }

  // backward() of a row whose keys come in blocks (the dense KL loss): after scores(t) over one block's
  // keys(), adds its d_weights and d_query_index terms to the row's (`first`: the row's first block
  // starts them) and its key gradient rows into dk_acc; store_row(t) after the last block. The blocks
  // are summed in call order.
  void accumulate(const float* di, float* dk_acc, bool first) {
    using gemm::Trans;
    const int64_t n = static_cast<int64_t>(keys_.size());
    indexer_score_grads(sx_.data(), n, rows_, nidx_, di, w_.data(), first ? dw_.data() : dw_block_.data(),
                        ds_.data());
    if (!first) {
      for (int64_t g = 0; g < nidx_; ++g) dw_[g] += dw_block_[g];
    }
    const Op* ds = nullptr;
    if constexpr (std::is_same_v<Op, float>) {
      ds = ds_.data();
    } else {
      from_float(ds_.data(), ds_op_.data(), nidx_ * rows_);
      ds = ds_op_.data();
    }
    mm(Trans::kYes, Trans::kNo, nidx_, didx_, rows_, 1.0f, ds, nidx_, kit_ptr_, didx_, first ? 0.0f : 1.0f,
       dqi_.data(), didx_);
    mm(Trans::kNo, Trans::kNo, rows_, didx_, nidx_, 1.0f, ds, nidx_, qit_.data(), didx_, 0.0f, dk_.data(), didx_);
    for (int64_t jj = 0; jj < n; ++jj) {
      float* dst = dk_acc + keys_[jj] * didx_;
      const float* src = dk_.data() + jj * didx_;
      for (int64_t c = 0; c < didx_; ++c) dst[c] += src[c];
    }
  }

  // Stores the row's d_query_index[t] and d_weights[t] (after backward() or the last accumulate()).
  void store_row(int64_t t) {
    store(dqi_.data(), a_.as<X>(pos_.d_query_index) + t * nidx_ * didx_, nidx_ * didx_);
    store(dw_.data(), a_.as<W>(pos_.d_weights) + t * nidx_, nidx_);
  }

  // A row without a visible selected key contributes nothing: zero d_query_index[t] and d_weights[t].
  void empty_row(int64_t t) {
    std::fill(dqi_.begin(), dqi_.end(), 0.0f);
    std::fill(dw_.begin(), dw_.end(), 0.0f);
    store_row(t);
  }

  // Rows keys()[first, first + count) of input `arg` (rows of `cols`) used in place: float32 storage
  // is already the operand, and consecutive selected rows (every visible key of a row selected, as
  // in a causal prefix shorter than K) need no gather. nullptr when they must be gathered. Every
  // step is checked, not just the span: with a duplicate index the span alone ([0, 0, 0, 3]) would
  // pass for rows 0..3.
  const Op* rows_in_place(int arg, int64_t cols, int64_t first, int64_t count) const {
    if constexpr (std::is_same_v<X, float> && std::is_same_v<Op, float>) {
      for (int64_t i = 1; i < count; ++i) {
        if (keys_[first + i] != keys_[first] + i) return nullptr;
      }
      return a_.as<const Op>(arg) + keys_[first] * cols;
    }
    return nullptr;
  }

  // dst row i = [a[v] | b[v]] as operands with v = keys()[first + i], for i < count (db may be 0).
  void gather(const X* a, int64_t da, const X* b, int64_t db, int64_t first, int64_t count, Op* dst) const {
    for (int64_t i = 0; i < count; ++i) {
      if (i + kPrefetchRows < count) {
        const int64_t ahead = keys_[first + i + kPrefetchRows];
        prefetch_row(a + ahead * da, da);
        if (db) prefetch_row(b + ahead * db, db);
      }
      const int64_t v = keys_[first + i];
      to_operand(a + v * da, dst + i * (da + db), da);
      if (db) to_operand(b + v * db, dst + i * (da + db) + da, db);
    }
  }

 private:
  const aot::KernelArgs& a_;
  const ScoreArgs pos_;
  const int64_t nidx_, didx_;
  std::vector<int64_t> keys_;
  std::vector<Op> qit_, kit_, ds_op_;
  std::vector<float> sx_, ds_, w_, dw_, dw_block_, dqi_, dk_;
  const Op* kit_ptr_ = nullptr;
  int64_t rows_ = 0;
};

constexpr int64_t kMaxKeyGradChunks = 16;
// The chunk buffers may take at most this share of the call's input + output bytes (and never more
// than kChunkBudgetBytes), so peak memory stays near the tensors' own; at least two chunks are kept
// whenever there are two rows, so the rows still run in parallel.
constexpr int64_t kChunkIoDivisor = 4;
constexpr int64_t kChunkBudgetBytes = int64_t{512} << 20;

// Runs row(kernel, t, dk_acc) for every query row t < t1 on the OpenMP team, with one kernel from
// make() per thread, and stores the summed key gradients [t2, didx] into output `dk_arg` (storage
// X), bitwise the same for any thread count (see the top of this file). Errors thrown by make or
// row are rethrown after the parallel regions as std::runtime_error naming `op`. Argument `skip_arg`
// (an optional input whose presence must not change any bit, such as sinks) is left out of the budget.
template <typename X, typename MakeKernel, typename Row>
void run_rows_with_key_grads(const char* op, const aot::KernelArgs& args, int64_t t1, int64_t t2, int64_t didx,
                             int dk_arg, MakeKernel make, Row row, int skip_arg = -1) {
  // Fixed chunk count (never the thread count), bounded so the partial buffers stay in budget.
  const int64_t per_chunk = std::max<int64_t>(1, t2 * didx * static_cast<int64_t>(sizeof(float)));
  const int64_t budget = std::min(kChunkBudgetBytes, io_bytes(args, skip_arg) / kChunkIoDivisor);
  const int64_t most = std::max<int64_t>(1, std::min(kMaxKeyGradChunks, t1));
  const int64_t chunks = std::clamp<int64_t>(budget / per_chunk, std::min<int64_t>(2, most), most);
  std::vector<float> partial(static_cast<size_t>(chunks * t2 * didx), 0.0f);
  ParallelError error;
#pragma omp parallel
  {
    // Every thread must reach the worksharing loop, even if its scratch allocation failed.
    decltype(make()) kernel;
    error.guard([&] { kernel = make(); });
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; ++c) {
      if (!kernel) continue;
      error.guard([&] {
        float* acc = partial.data() + c * t2 * didx;
        for (int64_t t = c; t < t1; t += chunks) row(*kernel, t, acc);
      });
    }
  }
  error.rethrow(op);
  X* dki = args.as<X>(dk_arg);
#pragma omp parallel
  {
    std::vector<float> acc(static_cast<size_t>(didx));
#pragma omp for schedule(static)
    for (int64_t j = 0; j < t2; ++j) {
      std::copy_n(partial.data() + j * didx, didx, acc.begin());
      for (int64_t c = 1; c < chunks; ++c) {
        const float* src = partial.data() + (c * t2 + j) * didx;
        for (int64_t i = 0; i < didx; ++i) acc[i] += src[i];
      }
      store(acc.data(), dki + j * didx, didx);
    }
  }
}

// The sizes and row plan of a launch that differentiates the scores of the slots of sparse_indices
// [.., 1, K] (lightning_indexer_grad, sparse_lightning_indexer_kl_loss_grad: the same input names), its
// indices checked against the plan.
struct IndexerGradSizes {
  int64_t t1, t2, nidx, didx, k;
};
struct IndexerGradLaunch {
  IndexerGradSizes z;
  RowPlan plan;
};

template <class OpT>
IndexerGradLaunch plan_indexer_grad(const aot::KernelArgs& args, const typename OpT::Attrs& attrs) {
  using In = typename OpT::In;
  const bool bsnd = attrs.layout == table::Layout::kBSND;
  const int r = bsnd ? 4 : 3;
  IndexerGradSizes z{};
  z.t1 = token_count(args, In::kQueryIndex, bsnd);
  z.t2 = token_count(args, In::kKeyIndex, bsnd);
  z.nidx = args.dim(In::kQueryIndex, r - 2);
  z.didx = args.dim(In::kQueryIndex, r - 1);
  z.k = args.dim(In::kSparseIndices, r - 1);
  RowPlan plan = plan_rows(OpT::kName, args, bsnd, In::kQueryIndex, In::kKeyIndex, In::kActualSeqLengthsQuery,
                           In::kActualSeqLengthsKey, attrs.sparse_mode,
                           Compression{attrs.cmp_ratio, In::kCmpResidualK});
  check_sparse_indices(OpT::kName, args.as<const int32_t>(In::kSparseIndices), z.t1, z.k, plan);
  return {z, std::move(plan)};
}

}  // namespace mgo::cpu
