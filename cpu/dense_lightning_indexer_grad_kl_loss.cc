// CPU AOT kernel of `dense_lightning_indexer_grad_kl_loss` (docs/contract.md section 4.4): the indexer's KL loss
// to the dense main attention and its three gradients, over every visible key of each query row.
//
// The dense sibling of sparse_lightning_indexer_grad_kl_loss.cc: the same teacher, loss and score backward
// (indexer_score_backward.h), but the keys of a row are all its visible keys, taken in blocks of kBlock, and the
// indexer distribution is y = exp(I - softmax_max_index) / softmax_sum_index from the given statistics (CANN's
// definition), so no pass needs the whole row: scratch is O(kBlock) per thread, never O(S) or S x S. Per block:
//   S  = scale * [q|q_rope]_h x [k|k_rope]_(h / G)^T   [G, block] GEMMs, one per key head (N2 = 1 or N1)
//   p  = (1/N1) sum_h exp(S_h - max_h) / sum_h          teacher, heads summed in order 0..N1-1
//   I, y, loss += sum p (ln max(p, 1e-8) - ln max(y, 1e-8)), dI = y - p, then ScoreBackward::accumulate.
// d_weights and d_query_index sum the blocks in key order; d_key_index is the deterministic chunked sum of
// run_rows_with_key_grads; the loss sums rows in order: the same bits for any thread count.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "indexer_score_backward.h"
#include "op_kernels.h"

namespace {

using Dli = mgo::table::DenseLightningIndexerGradKLLoss;
using In = Dli::In;
using OutParam = Dli::OutParam;

// Keys per block, a multiple of mgo::cpu::kScorePad: a block of 576-wide bf16 keys stays in L2 for its GEMMs.
constexpr int64_t kBlock = 256;
constexpr float kLogFloor = 1e-8f;

struct Sizes {
  int64_t t1, t2, s1, n1, n2, g, d, dr, dq, nidx, didx;
  bool bsnd;

  // Offset of (row t, key head hk, group 0) in softmax_max/softmax_sum: [N2, T1, G] or [B, N2, S1, G].
  int64_t stat(int64_t t, int64_t hk) const {
    return bsnd ? ((t / s1 * n2 + hk) * s1 + t % s1) * g : (hk * t1 + t) * g;
  }
};

template <typename X, typename Op, typename W>
class RowKernel {
 public:
  RowKernel(const mgo::aot::KernelArgs& args, const Sizes& z, const mgo::cpu::RowPlan& plan, float scale)
      : a_(args), z_(z), plan_(plan), scale_(scale),
        sb_(args, mgo::cpu::score_args_of<Dli>(), z.nidx, z.didx, kBlock),
        qt_(static_cast<size_t>(z.n1 * z.dq)), kt_(static_cast<size_t>(kBlock * z.dq)),
        s_(static_cast<size_t>(z.g * kBlock)), p_(static_cast<size_t>(kBlock)), score_(static_cast<size_t>(kBlock)),
        y_(static_cast<size_t>(kBlock)) {}

  // Processes query row t; adds its key gradients to dk_acc [T2, Didx]; returns its loss.
  double row(int64_t t, float* dk_acc) {
    const int64_t n = plan_.limit[t];
    if (n == 0) {  // no visible key: the row contributes nothing, its statistics are never read
      sb_.empty_row(t);
      return 0.0;
    }
    load_query(t);
    const float max_index = a_.as<const float>(In::kSoftmaxMaxIndex)[t];
    const float sum_index = a_.as<const float>(In::kSoftmaxSumIndex)[t];
    const float log_sum_index = std::log(sum_index);
    const float inv_sum_index = 1.0f / sum_index;
    const float log_floor = std::log(kLogFloor);
    double loss = 0.0;
    std::vector<int64_t>& keys = sb_.keys();
    for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
      const int64_t nb = std::min(kBlock, n - b0);
      keys.resize(static_cast<size_t>(nb));
      for (int64_t j = 0; j < nb; ++j) keys[j] = plan_.key_base[t] + b0 + j;
      teacher(t, nb);
      sb_.scores(t);
      mgo::cpu::relu_weighted_sum_by_key(sb_.sxt(), nb, z_.nidx, sb_.weights(), score_.data());
      mgo::cpu::exp_shifted(score_.data(), nb, max_index, y_.data());
      for (int64_t j = 0; j < nb; ++j) {
        const float pj = p_[j];
        const float log_y = std::max(score_[j] - max_index - log_sum_index, log_floor);
        loss += static_cast<double>(pj * (std::log(std::max(pj, kLogFloor)) - log_y));
        y_[j] = y_[j] * inv_sum_index - pj;
      }
      sb_.accumulate(y_.data(), dk_acc, b0 == 0);
    }
    sb_.store_row(t);
    return loss;
  }

 private:
  // qt_ [N1, D + Dr] = the row's [query | query_rope] as operands.
  void load_query(int64_t t) {
    const X* q = a_.as<const X>(In::kQuery) + t * z_.n1 * z_.d;
    const X* qr = a_.as<const X>(In::kQueryRope) + t * z_.n1 * z_.dr;
    for (int64_t h = 0; h < z_.n1; ++h) {
      mgo::cpu::to_operand(q + h * z_.d, qt_.data() + h * z_.dq, z_.d);
      if (z_.dr) mgo::cpu::to_operand(qr + h * z_.dr, qt_.data() + h * z_.dq + z_.d, z_.dr);
    }
  }

  // p_[0, nb) for the block keys() from the recomputed main-attention probabilities.
  void teacher(int64_t t, int64_t nb) {
    using mgo::gemm::Trans;
    const int64_t nbp = mgo::cpu::round_up(nb, mgo::cpu::kScorePad);
    const X* key = a_.as<const X>(In::kKey);
    const X* key_rope = a_.as<const X>(In::kKeyRope);
    const float* mx = a_.as<const float>(In::kSoftmaxMax);
    const float* sm = a_.as<const float>(In::kSoftmaxSum);
    const int64_t first = sb_.keys()[0];
    std::fill(p_.begin(), p_.begin() + nb, 0.0f);
    std::fill(kt_.begin() + nb * z_.dq, kt_.begin() + nbp * z_.dq, Op{});
    for (int64_t hk = 0; hk < z_.n2; ++hk) {  // key head hk serves query heads hk*G .. hk*G + G - 1
      for (int64_t j = 0; j < nb; ++j) {
        const int64_t row = (first + j) * z_.n2 + hk;
        mgo::cpu::to_operand(key + row * z_.d, kt_.data() + j * z_.dq, z_.d);
        if (z_.dr) mgo::cpu::to_operand(key_rope + row * z_.dr, kt_.data() + j * z_.dq + z_.d, z_.dr);
      }
      mgo::cpu::mm(Trans::kNo, Trans::kYes, z_.g, nbp, z_.dq, scale_, qt_.data() + hk * z_.g * z_.dq, z_.dq,
                   kt_.data(), z_.dq, 0.0f, s_.data(), nbp);
      const int64_t at = z_.stat(t, hk);
      for (int64_t g = 0; g < z_.g; ++g) {
        mgo::cpu::exp_accumulate(s_.data() + g * nbp, nb, mx[at + g], 1.0f / sm[at + g], p_.data());
      }
    }
    const float inv_n1 = 1.0f / static_cast<float>(z_.n1);
    for (int64_t j = 0; j < nb; ++j) p_[j] *= inv_n1;
  }

  const mgo::aot::KernelArgs& a_;
  const Sizes z_;
  const mgo::cpu::RowPlan& plan_;
  const float scale_;
  mgo::cpu::ScoreBackward<X, Op, W> sb_;
  std::vector<Op> qt_, kt_;
  std::vector<float> s_, p_, score_, y_;
};

template <typename X, typename Op, typename W>
void run(const mgo::aot::KernelArgs& args, const Sizes& z, const mgo::cpu::RowPlan& plan, float scale) {
  std::vector<double> row_loss(static_cast<size_t>(z.t1), 0.0);
  mgo::cpu::run_rows_with_key_grads<X>(
      Dli::kName, args, z.t1, z.t2, z.didx, OutParam::kDKeyIndex,
      [&] { return std::make_unique<RowKernel<X, Op, W>>(args, z, plan, scale); },
      [&](RowKernel<X, Op, W>& kernel, int64_t t, float* acc) { row_loss[t] = kernel.row(t, acc); });
  double loss = 0.0;
  for (double l : row_loss) loss += l;
  *args.as<float>(OutParam::kLoss) = static_cast<float>(loss);
}

}  // namespace

void mgo::cpu::kernels::dense_lightning_indexer_grad_kl_loss(
    const aot::KernelArgs& args, const table::DenseLightningIndexerGradKLLoss::Attrs& attrs) {
  const bool bsnd = attrs.layout == table::Layout::kBSND;
  const int r = bsnd ? 4 : 3;
  Sizes z{};
  z.bsnd = bsnd;
  z.t1 = token_count(args, In::kQuery, bsnd);
  z.t2 = token_count(args, In::kKey, bsnd);
  z.s1 = bsnd ? args.dim(In::kQuery, 1) : z.t1;
  z.n1 = args.dim(In::kQuery, r - 2);
  z.n2 = args.dim(In::kKey, r - 2);
  z.g = z.n1 / z.n2;
  z.d = args.dim(In::kQuery, r - 1);
  z.dr = args.numel(In::kQueryRope) > 0 ? args.dim(In::kQueryRope, r - 1) : 0;
  z.dq = z.d + z.dr;
  z.nidx = args.dim(In::kQueryIndex, r - 2);
  z.didx = args.dim(In::kQueryIndex, r - 1);
  const RowPlan plan = plan_rows(Dli::kName, args, bsnd, In::kQuery, In::kKey, In::kActualSeqLengthsQuery,
                                 In::kActualSeqLengthsKey, attrs.sparse_mode,
                                 Compression{attrs.cmp_ratio, In::kCmpResidualK});
  const float scale = static_cast<float>(attrs.scale_value);
  dispatch_indexer(args, In::kQuery, In::kWeights, [&](auto x, auto op, auto w) {
    run<decltype(x), decltype(op), decltype(w)>(args, z, plan, scale);
  });
}
