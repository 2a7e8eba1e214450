// CPU AOT kernel of `sparse_lightning_indexer_grad_kl_loss` (SPEC section 4): the indexer's KL loss
// against the main attention's teacher distribution and its three gradients, one pass per query row.
//
// Per row t with n visible selected keys (padded to npad, a multiple of 64, so GEMM shapes repeat
// and oneDNN's cached bf16 primitives are reused):
//   S  = scale * [q|q_rope] x [k|k_rope]^T           [N1, npad]   GEMM
//   p  = (1/N1) sum_h exp(S_h - max_h) / sum_h        teacher (not renormalised)
//   SxT = key_index x query_index^T                   [npad, Nidx] GEMM
//   I  = relu(SxT) . w, y = softmax(I), loss_t, dI = y - p, dW, dST = dI * w * [SxT > 0]
//   d_query_index = dST^T x key_index                 [Nidx, Didx] GEMM
//   dK rows       = dST x query_index                 [npad, Didx] GEMM, scattered into d_key_index
// The index scores are kept key-major ([npad, Nidx]) so the dK GEMM reads dS untransposed: with
// dS^T as a transposed operand it ran at half the rate of the other products.
// bf16 inputs run bf16 GEMMs with float32 accumulation (dS rounded to bf16 first, as Ascend's cube
// unit does); float16/float32 inputs run float32 GEMMs.
//
// Determinism: rows are split into a fixed number of chunks (row t -> chunk t % C, C independent of
// the thread count); each chunk accumulates its rows' key gradients in row order into its own
// [T2, Didx] buffer, and the buffers are summed in chunk order. Row outputs are owned by one row.
#include "../infer_shape/sparse_lightning_indexer_grad_kl_loss.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

#include "lightning_indexer_common.h"

using mgo::aot::AotExtra;
using mgo::aot::TypeId;

namespace {

constexpr const char* kOp = "sparse_lightning_indexer_grad_kl_loss";
constexpr int64_t kPad = 64;
// Keys per teacher (main-attention) GEMM block, a multiple of kPad.
constexpr int64_t kTeacherBlock = 256;
constexpr int64_t kMaxChunks = 16;
// The chunk buffers may take at most this share of the call's input + output bytes (and never more
// than kChunkBudgetBytes), so peak memory stays near the tensors' own; at least two chunks are kept
// whenever there are two rows, so the rows still run in parallel.
constexpr int64_t kChunkIoDivisor = 4;
constexpr int64_t kChunkBudgetBytes = int64_t{512} << 20;
constexpr float kLogFloor = 1e-8f;

enum Arg {
  kQuery, kKey, kQueryIndex, kKeyIndex, kWeights, kSparse, kMax, kSum, kQueryRope, kKeyRope, kLensQ, kLensK,
  kDQueryIndex, kDKeyIndex, kDWeights, kLoss
};

mgo::infer::InferResult rules(const std::vector<mgo::infer::TensorDesc>& in, AotExtra* extra) {
  return mgo::infer::sparse_lightning_indexer_grad_kl_loss(in, extra->GetAttrStr("layout"),
                                                          extra->GetAttrInt("sparse_mode"));
}

struct Sizes {
  int64_t t1, t2, n1, d, dr, dq, nidx, didx, k;
};

// Rows gathered ahead of the one being copied: selected key rows are scattered through memory, and
// without the hint each row's copy waits on its first cache misses.
constexpr int64_t kPrefetchRows = 4;

template <typename X>
void prefetch_row(const X* row, int64_t n) {
  const char* p = reinterpret_cast<const char*>(row);
  for (int64_t off = 0; off < n * static_cast<int64_t>(sizeof(X)); off += 64) __builtin_prefetch(p + off);
}

template <typename X, typename Op, typename W>
class RowKernel {
 public:
  RowKernel(const mgo::aot::KernelArgs& args, const Sizes& z, const mgo::cpu::RowPlan& plan, float scale)
      : a_(args), z_(z), plan_(plan), scale_(scale) {
    const int64_t kp = mgo::cpu::round_up(z.k, kPad);
    vis_.reserve(static_cast<size_t>(z.k));
    qt_.resize(static_cast<size_t>(z.n1 * z.dq));
    kt_.resize(static_cast<size_t>(std::min(kp, kTeacherBlock) * z.dq));
    s_.resize(static_cast<size_t>(z.n1 * std::min(kp, kTeacherBlock)));
    p_.resize(static_cast<size_t>(kp));
    qit_.resize(static_cast<size_t>(z.nidx * z.didx));
    kit_.resize(static_cast<size_t>(kp * z.didx));
    sx_.resize(static_cast<size_t>(z.nidx * kp));
    ds_.resize(static_cast<size_t>(z.nidx * kp));
    if constexpr (!std::is_same_v<Op, float>) ds_op_.resize(static_cast<size_t>(z.nidx * kp));
    score_.resize(static_cast<size_t>(kp));
    y_.resize(static_cast<size_t>(kp));
    w_.resize(static_cast<size_t>(z.nidx));
    dw_.resize(static_cast<size_t>(z.nidx));
    dqi_.resize(static_cast<size_t>(z.nidx * z.didx));
    dk_.resize(static_cast<size_t>(kp * z.didx));
  }

  // Processes query row t; adds its key gradients to dk_acc [T2, Didx]; returns its loss.
  double row(int64_t t, float* dk_acc) {
    using mgo::gemm::Trans;
    collect_visible(t);
    const int64_t n = static_cast<int64_t>(vis_.size());
    X* dqi_out = a_.as<X>(kDQueryIndex) + t * z_.nidx * z_.didx;
    W* dw_out = a_.as<W>(kDWeights) + t * z_.nidx;
    if (n == 0) {  // no visible key: the row contributes nothing
      std::fill(dqi_.begin(), dqi_.end(), 0.0f);
      std::fill(dw_.begin(), dw_.end(), 0.0f);
      mgo::cpu::store(dqi_.data(), dqi_out, z_.nidx * z_.didx);
      mgo::cpu::store(dw_.data(), dw_out, z_.nidx);
      return 0.0;
    }
    const int64_t np = mgo::cpu::round_up(n, kPad);
    teacher(t, n, np);
    // Index scores.
    mgo::cpu::to_operand(a_.as<const X>(kQueryIndex) + t * z_.nidx * z_.didx, qit_.data(), z_.nidx * z_.didx);
    // Key rows in place when they can be (then unpadded: rows past n may hold anything, even NaN),
    // else gathered and zero-padded to np.
    const Op* kit = rows_in_place(kKeyIndex, z_.didx, 0, n);
    const int64_t rows = kit ? n : np;
    if (!kit) {
      gather(a_.as<const X>(kKeyIndex), z_.didx, nullptr, 0, 0, n, kit_.data());
      std::fill(kit_.begin() + n * z_.didx, kit_.begin() + np * z_.didx, Op{});
      kit = kit_.data();
    }
    mgo::cpu::mm(Trans::kNo, Trans::kYes, rows, z_.nidx, z_.didx, 1.0f, kit, z_.didx, qit_.data(), z_.didx, 0.0f,
                 sx_.data(), z_.nidx);
    mgo::cpu::load(a_.as<const W>(kWeights) + t * z_.nidx, w_.data(), z_.nidx);
    mgo::cpu::relu_weighted_sum_by_key(sx_.data(), n, z_.nidx, w_.data(), score_.data());
    // Softmax, loss and dI (in place of y).
    float imax = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) imax = std::max(imax, score_[j]);
    const float z = mgo::cpu::exp_shifted(score_.data(), n, imax, y_.data());
    const float inv_z = 1.0f / z;
    const float log_z = std::log(z);
    const float log_floor = std::log(kLogFloor);
    double loss = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const float pj = p_[j];
      const float log_y = std::max(score_[j] - imax - log_z, log_floor);
      loss += static_cast<double>(pj * (std::log(std::max(pj, kLogFloor)) - log_y));
      y_[j] = y_[j] * inv_z - pj;
    }
    mgo::cpu::indexer_score_grads(sx_.data(), n, rows, z_.nidx, y_.data(), w_.data(), dw_.data(), ds_.data());
    const Op* ds = nullptr;
    if constexpr (std::is_same_v<Op, float>) {
      ds = ds_.data();
    } else {
      mgo::cpu::from_float(ds_.data(), ds_op_.data(), z_.nidx * rows);
      ds = ds_op_.data();
    }
    mgo::cpu::mm(Trans::kYes, Trans::kNo, z_.nidx, z_.didx, rows, 1.0f, ds, z_.nidx, kit, z_.didx, 0.0f,
                 dqi_.data(), z_.didx);
    mgo::cpu::mm(Trans::kNo, Trans::kNo, rows, z_.didx, z_.nidx, 1.0f, ds, z_.nidx, qit_.data(), z_.didx, 0.0f,
                 dk_.data(), z_.didx);
    mgo::cpu::store(dqi_.data(), dqi_out, z_.nidx * z_.didx);
    mgo::cpu::store(dw_.data(), dw_out, z_.nidx);
    for (int64_t jj = 0; jj < n; ++jj) {
      float* dst = dk_acc + vis_[jj] * z_.didx;
      const float* src = dk_.data() + jj * z_.didx;
      for (int64_t c = 0; c < z_.didx; ++c) dst[c] += src[c];
    }
    return loss;
  }

 private:
  // Global key rows of the visible selected keys, in ascending order (indices already range-checked).
  // The loss does not depend on the slot order; ascending rows turn the gathers and the dK scatter
  // into forward sweeps through memory instead of random row accesses.
  void collect_visible(int64_t t) {
    vis_.clear();
    const int32_t* idx = a_.as<const int32_t>(kSparse) + t * z_.k;
    for (int64_t s = 0; s < z_.k; ++s) {
      if (idx[s] >= 0 && idx[s] < plan_.limit[t]) vis_.push_back(plan_.key_base[t] + idx[s]);
    }
    std::sort(vis_.begin(), vis_.end());
  }

  // Rows vis_[first, first + count) of input `arg` (rows of `cols`) used in place: float32 storage
  // is already the operand, and consecutive selected rows (every visible key of a row selected, as
  // in a causal prefix shorter than K) need no gather. nullptr when they must be gathered.
  const Op* rows_in_place(int arg, int64_t cols, int64_t first, int64_t count) const {
    if constexpr (std::is_same_v<X, float> && std::is_same_v<Op, float>) {
      if (vis_[first + count - 1] - vis_[first] == count - 1) return a_.as<const Op>(arg) + vis_[first] * cols;
    }
    return nullptr;
  }

  // dst row i = [a[v] | b[v]] as operands with v = vis_[first + i], for i < count (db may be 0).
  void gather(const X* a, int64_t da, const X* b, int64_t db, int64_t first, int64_t count, Op* dst) const {
    for (int64_t i = 0; i < count; ++i) {
      if (i + kPrefetchRows < count) {
        const int64_t ahead = vis_[first + i + kPrefetchRows];
        prefetch_row(a + ahead * da, da);
        if (db) prefetch_row(b + ahead * db, db);
      }
      const int64_t v = vis_[first + i];
      mgo::cpu::to_operand(a + v * da, dst + i * (da + db), da);
      if (db) mgo::cpu::to_operand(b + v * db, dst + i * (da + db) + da, db);
    }
  }

  // p[0, n) from the recomputed main-attention probabilities.
  void teacher(int64_t t, int64_t n, int64_t np) {
    using mgo::gemm::Trans;
    const X* q = a_.as<const X>(kQuery) + t * z_.n1 * z_.d;
    const X* qr = a_.as<const X>(kQueryRope) + t * z_.n1 * z_.dr;
    for (int64_t h = 0; h < z_.n1; ++h) {
      mgo::cpu::to_operand(q + h * z_.d, qt_.data() + h * z_.dq, z_.d);
      if (z_.dr) mgo::cpu::to_operand(qr + h * z_.dr, qt_.data() + h * z_.dq + z_.d, z_.dr);
    }
    const float* mx = a_.as<const float>(kMax) + t * z_.n1;
    const float* sm = a_.as<const float>(kSum) + t * z_.n1;
    std::fill(p_.begin(), p_.begin() + n, 0.0f);
    // Blocks of kTeacherBlock keys: the gathered block stays in L2 for its GEMM (a whole row of
    // 2048 x 576 bf16 keys does not), and p[j] still sums the heads in order 0..N1-1.
    for (int64_t b0 = 0; b0 < n; b0 += kTeacherBlock) {
      const int64_t nb = std::min(kTeacherBlock, n - b0);
      const int64_t nbp = std::min(kTeacherBlock, np - b0);
      int64_t ld = nbp;
      if (const Op* kb = rows_in_place(kKey, z_.d, b0, nb)) {  // in place: key and rope as two GEMMs
        ld = nb;
        mgo::cpu::mm(Trans::kNo, Trans::kYes, z_.n1, nb, z_.d, scale_, qt_.data(), z_.dq, kb, z_.d, 0.0f,
                     s_.data(), ld);
        if (z_.dr) {
          mgo::cpu::mm(Trans::kNo, Trans::kYes, z_.n1, nb, z_.dr, scale_, qt_.data() + z_.d, z_.dq,
                       rows_in_place(kKeyRope, z_.dr, b0, nb), z_.dr, 1.0f, s_.data(), ld);
        }
      } else {
        gather(a_.as<const X>(kKey), z_.d, a_.as<const X>(kKeyRope), z_.dr, b0, nb, kt_.data());
        std::fill(kt_.begin() + nb * z_.dq, kt_.begin() + nbp * z_.dq, Op{});
        mgo::cpu::mm(Trans::kNo, Trans::kYes, z_.n1, nbp, z_.dq, scale_, qt_.data(), z_.dq, kt_.data(), z_.dq,
                     0.0f, s_.data(), ld);
      }
      for (int64_t h = 0; h < z_.n1; ++h) {
        mgo::cpu::exp_accumulate(s_.data() + h * ld, nb, mx[h], 1.0f / sm[h], p_.data() + b0);
      }
    }
    const float inv_n1 = 1.0f / static_cast<float>(z_.n1);
    for (int64_t j = 0; j < n; ++j) p_[j] *= inv_n1;
  }

  const mgo::aot::KernelArgs& a_;
  const Sizes z_;
  const mgo::cpu::RowPlan& plan_;
  const float scale_;
  std::vector<int64_t> vis_;
  std::vector<Op> qt_, kt_, qit_, kit_, ds_op_;
  std::vector<float> s_, p_, sx_, ds_, score_, y_, w_, dw_, dqi_, dk_;
};

template <typename X, typename Op, typename W>
void run(const mgo::aot::KernelArgs& args, const Sizes& z, const mgo::cpu::RowPlan& plan, float scale) {
  // Fixed chunk count (never the thread count), bounded so the partial buffers stay in budget.
  const int64_t per_chunk = std::max<int64_t>(1, z.t2 * z.didx * static_cast<int64_t>(sizeof(float)));
  const int64_t budget = std::min(kChunkBudgetBytes, mgo::cpu::io_bytes(args) / kChunkIoDivisor);
  const int64_t most = std::max<int64_t>(1, std::min(kMaxChunks, z.t1));
  const int64_t chunks = std::clamp<int64_t>(budget / per_chunk, std::min<int64_t>(2, most), most);
  std::vector<float> partial(static_cast<size_t>(chunks * z.t2 * z.didx), 0.0f);
  std::vector<double> row_loss(static_cast<size_t>(z.t1), 0.0);
  mgo::cpu::ParallelError error;
#pragma omp parallel
  {
    // Every thread must reach the worksharing loop, even if its scratch allocation failed.
    std::unique_ptr<RowKernel<X, Op, W>> kernel;
    error.guard([&] { kernel = std::make_unique<RowKernel<X, Op, W>>(args, z, plan, scale); });
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; ++c) {
      if (!kernel) continue;
      error.guard([&] {
        float* acc = partial.data() + c * z.t2 * z.didx;
        for (int64_t t = c; t < z.t1; t += chunks) row_loss[t] = kernel->row(t, acc);
      });
    }
  }
  error.rethrow(kOp);
  X* dki = args.as<X>(kDKeyIndex);
#pragma omp parallel
  {
    std::vector<float> acc(static_cast<size_t>(z.didx));
#pragma omp for schedule(static)
    for (int64_t j = 0; j < z.t2; ++j) {
      std::copy_n(partial.data() + j * z.didx, z.didx, acc.begin());
      for (int64_t c = 1; c < chunks; ++c) {
        const float* src = partial.data() + (c * z.t2 + j) * z.didx;
        for (int64_t i = 0; i < z.didx; ++i) acc[i] += src[i];
      }
      mgo::cpu::store(acc.data(), dki + j * z.didx, z.didx);
    }
  }
  double loss = 0.0;
  for (double l : row_loss) loss += l;
  *args.as<float>(kLoss) = static_cast<float>(loss);
}

}  // namespace

extern "C" std::vector<std::vector<int64_t>> SparseLightningIndexerGradKLLossInferShape(int* ndims, int64_t** shapes,
                                                                                      AotExtra* extra) {
  return rules(mgo::aot::shape_descs(12, ndims, shapes), extra).shapes;
}

extern "C" std::vector<TypeId> SparseLightningIndexerGradKLLossInferType(std::vector<TypeId> types, AotExtra* extra) {
  return mgo::aot::type_ids(rules(mgo::aot::type_descs(types), extra));
}

extern "C" int SparseLightningIndexerGradKLLoss(int nparam, void** params, int* ndims, int64_t** shapes,
                                                const char** dtypes, void*, void* extra_ptr) {
  auto* extra = static_cast<AotExtra*>(extra_ptr);
  const mgo::aot::KernelArgs args(nparam, params, ndims, shapes, dtypes);
  std::vector<mgo::infer::TensorDesc> in;
  for (int i = 0; i < 12; ++i) in.push_back(args.desc(i));
  rules(in, extra);
  const bool bsnd = extra->GetAttrStr("layout") == "BSND";
  const int r = bsnd ? 4 : 3;
  Sizes z{};
  z.t1 = mgo::cpu::token_count(args, kQuery, bsnd);
  z.t2 = mgo::cpu::token_count(args, kKey, bsnd);
  z.n1 = args.dim(kQuery, r - 2);
  z.d = args.dim(kQuery, r - 1);
  z.dr = args.numel(kQueryRope) > 0 ? args.dim(kQueryRope, r - 1) : 0;
  z.dq = z.d + z.dr;
  z.nidx = args.dim(kQueryIndex, r - 2);
  z.didx = args.dim(kQueryIndex, r - 1);
  z.k = args.dim(kSparse, r - 1);
  const mgo::cpu::RowPlan plan =
      mgo::cpu::plan_rows(kOp, args, bsnd, kQuery, kKey, kLensQ, kLensK, extra->GetAttrInt("sparse_mode"));
  mgo::cpu::check_sparse_indices(kOp, args.as<const int32_t>(kSparse), z.t1, z.k, plan);
  const float scale = extra->GetAttrFloat("scale_value");
  mgo::cpu::dispatch_float(args.dtype(kQuery), [&](auto x_tag) {
    using X = decltype(x_tag);
    mgo::cpu::dispatch_float(args.dtype(kWeights), [&](auto w_tag) {
      return mgo::cpu::with_operand<X>([&](auto, auto op) {
        run<X, decltype(op), decltype(w_tag)>(args, z, plan, scale);
        return 0;
      });
    });
    return 0;
  });
  return 0;
}
