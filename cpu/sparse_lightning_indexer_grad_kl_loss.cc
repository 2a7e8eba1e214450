// CPU AOT kernel of `sparse_lightning_indexer_grad_kl_loss` (docs/contract.md section 4.2): the indexer's KL loss
// against the main attention's teacher distribution and its three gradients, one pass per query row.
//
// Per row t with n visible selected keys (padded to npad, a multiple of 64):
//   S  = scale * [q|q_rope] x [k|k_rope]^T           [N1, npad]   GEMM
//   p  = (1/N1) sum_h exp(S_h - max_h) / sum_h        teacher (not renormalised); with a sink > -inf
//        (which max and sum include) renormalised to sum to 1 over the row's keys, CANN's
//        1/(N1 - sum_h P_sink,h) (see accumulate_shifted)
//   SxT = key_index x query_index^T, I = relu(SxT) . w, y = softmax(I), loss_t, dI = y - p
//   then the score backward of indexer_score_backward.h (shared with lightning_indexer_grad), which
//   also makes the key gradient deterministic.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

#include "indexer_score_backward.h"
#include "op_kernels.h"

namespace {

using Sli = mgo::table::SparseLightningIndexerGradKLLoss;
using In = Sli::In;
using OutParam = Sli::OutParam;

// Keys per teacher (main-attention) GEMM block, a multiple of mgo::cpu::kScorePad.
constexpr int64_t kTeacherBlock = 256;
constexpr float kLogFloor = 1e-8f;

struct Sizes {
  int64_t t1, t2, n1, d, dr, dq, nidx, didx, k;
  bool renormalise;  // some sink > -inf (docs/contract.md section 4.2)
};

template <typename X, typename Op, typename W>
class RowKernel {
 public:
  RowKernel(const mgo::aot::KernelArgs& args, const Sizes& z, const mgo::cpu::RowPlan& plan, float scale)
      : a_(args), z_(z), plan_(plan), scale_(scale),
        sb_(args, mgo::cpu::score_args_of<Sli>(), z.nidx, z.didx, z.k) {
    const int64_t kp = mgo::cpu::round_up(z.k, mgo::cpu::kScorePad);
    qt_.resize(static_cast<size_t>(z.n1 * z.dq));
    kt_.resize(static_cast<size_t>(std::min(kp, kTeacherBlock) * z.dq));
    s_.resize(static_cast<size_t>(z.n1 * std::min(kp, kTeacherBlock)));
    p_.resize(static_cast<size_t>(kp));
    score_.resize(static_cast<size_t>(kp));
    y_.resize(static_cast<size_t>(kp));
    lse_.resize(static_cast<size_t>(z.n1));
  }

  // Processes query row t; adds its key gradients to dk_acc [T2, Didx]; returns its loss.
  double row(int64_t t, float* dk_acc) {
    collect_visible(t);
    const int64_t n = static_cast<int64_t>(sb_.keys().size());
    if (n == 0) {  // no visible key: the row contributes nothing
      sb_.empty_row(t);
      return 0.0;
    }
    teacher(t, n, mgo::cpu::round_up(n, mgo::cpu::kScorePad));
    sb_.scores(t);
    mgo::cpu::relu_weighted_sum_by_key(sb_.sxt(), n, z_.nidx, sb_.weights(), score_.data());
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
    sb_.backward(t, y_.data(), dk_acc);
    return loss;
  }

 private:
  // Global key rows of the visible selected keys, in ascending order (indices already range-checked;
  // the loss does not depend on the slot order).
  void collect_visible(int64_t t) {
    std::vector<int64_t>& vis = sb_.keys();
    vis.clear();
    const int32_t* idx = a_.as<const int32_t>(In::kSparseIndices) + t * z_.k;
    for (int64_t s = 0; s < z_.k; ++s) {
      if (idx[s] >= 0 && idx[s] < plan_.limit[t]) vis.push_back(plan_.key_base[t] + idx[s]);
    }
    std::sort(vis.begin(), vis.end());
  }

  // p[0, n) from the recomputed main-attention probabilities.
  void teacher(int64_t t, int64_t n, int64_t np) {
    using mgo::gemm::Trans;
    const X* q = a_.as<const X>(In::kQuery) + t * z_.n1 * z_.d;
    const X* qr = a_.as<const X>(In::kQueryRope) + t * z_.n1 * z_.dr;
    for (int64_t h = 0; h < z_.n1; ++h) {
      mgo::cpu::to_operand(q + h * z_.d, qt_.data() + h * z_.dq, z_.d);
      if (z_.dr) mgo::cpu::to_operand(qr + h * z_.dr, qt_.data() + h * z_.dq + z_.d, z_.dr);
    }
    const float* mx = a_.as<const float>(In::kSoftmaxMax) + t * z_.n1;
    const float* sm = a_.as<const float>(In::kSoftmaxSum) + t * z_.n1;
    std::fill(p_.begin(), p_.begin() + n, 0.0f);
    for (int64_t h = 0; z_.renormalise && h < z_.n1; ++h) lse_[h] = mx[h] + std::log(static_cast<double>(sm[h]));
    double shift = -std::numeric_limits<double>::infinity();
    // Blocks of kTeacherBlock keys: the gathered block stays in L2 for its GEMM (a whole row of
    // 2048 x 576 bf16 keys does not), and p[j] still sums the heads in order 0..N1-1.
    for (int64_t b0 = 0; b0 < n; b0 += kTeacherBlock) {
      const int64_t nb = std::min(kTeacherBlock, n - b0);
      const int64_t nbp = std::min(kTeacherBlock, np - b0);
      int64_t ld = nbp;
      if (const Op* kb = sb_.rows_in_place(In::kKey, z_.d, b0, nb)) {  // in place: key and rope as two GEMMs
        ld = nb;
        mgo::cpu::mm(Trans::kNo, Trans::kYes, z_.n1, nb, z_.d, scale_, qt_.data(), z_.dq, kb, z_.d, 0.0f,
                     s_.data(), ld);
        if (z_.dr) {
          mgo::cpu::mm(Trans::kNo, Trans::kYes, z_.n1, nb, z_.dr, scale_, qt_.data() + z_.d, z_.dq,
                       sb_.rows_in_place(In::kKeyRope, z_.dr, b0, nb), z_.dr, 1.0f, s_.data(), ld);
        }
      } else {
        sb_.gather(a_.as<const X>(In::kKey), z_.d, a_.as<const X>(In::kKeyRope), z_.dr, b0, nb, kt_.data());
        std::fill(kt_.begin() + nb * z_.dq, kt_.begin() + nbp * z_.dq, Op{});
        mgo::cpu::mm(Trans::kNo, Trans::kYes, z_.n1, nbp, z_.dq, scale_, qt_.data(), z_.dq, kt_.data(), z_.dq,
                     0.0f, s_.data(), ld);
      }
      if (z_.renormalise) {
        accumulate_shifted(b0, nb, ld, shift);
        continue;
      }
      for (int64_t h = 0; h < z_.n1; ++h) {
        mgo::cpu::exp_accumulate(s_.data() + h * ld, nb, mx[h], 1.0f / sm[h], p_.data() + b0);
      }
    }
    if (z_.renormalise) {
      double total = 0.0;
      for (int64_t j = 0; j < n; ++j) total += p_[j];
      const float inv_total = static_cast<float>(1.0 / total);
      for (int64_t j = 0; j < n; ++j) p_[j] *= inv_total;
      return;
    }
    const float inv_n1 = 1.0f / static_cast<float>(z_.n1);
    for (int64_t j = 0; j < n; ++j) p_[j] *= inv_n1;
  }

  // The renormalised teacher with sinks: p_j = sum_h P[h, j] / sum_{h, j'} P[h, j'], which is
  // CANN's sum_h P[h, j] / (N1 - sum_h P_sink,h) when the statistics are the forward's over these
  // keys. Formed as sum_h exp(S_hj - lse_h - shift) with lse_h = max_h + ln sum_h and shift the
  // running max of S_hj - lse_h over the row (earlier blocks rescaled when it grows), in float64
  // exponents: a large sink makes every P[h, j] (and N1 - sum P_sink) underflow in float32, yet their
  // ratio is finite. Adds block [b0, b0 + nb) of s_ (leading dim ld) to p_.
  void accumulate_shifted(int64_t b0, int64_t nb, int64_t ld, double& shift) {
    double block_max = -std::numeric_limits<double>::infinity();
    for (int64_t h = 0; h < z_.n1; ++h) {
      for (int64_t j = 0; j < nb; ++j) block_max = std::max(block_max, s_[h * ld + j] - lse_[h]);
    }
    if (block_max > shift) {
      if (shift > -std::numeric_limits<double>::infinity()) {
        const float rescale = static_cast<float>(std::exp(shift - block_max));
        for (int64_t j = 0; j < b0; ++j) p_[j] *= rescale;
      }
      shift = block_max;
    }
    if (shift == -std::numeric_limits<double>::infinity()) return;  // nothing finite yet: adds 0
    for (int64_t h = 0; h < z_.n1; ++h) {
      for (int64_t j = 0; j < nb; ++j) p_[b0 + j] += static_cast<float>(std::exp(s_[h * ld + j] - lse_[h] - shift));
    }
  }

  const mgo::aot::KernelArgs& a_;
  const Sizes z_;
  const mgo::cpu::RowPlan& plan_;
  const float scale_;
  mgo::cpu::ScoreBackward<X, Op, W> sb_;
  std::vector<Op> qt_, kt_;
  std::vector<float> s_, p_, score_, y_;
  std::vector<double> lse_;  // [N1] max + ln sum of the row's heads (renormalised teacher only)
};

template <typename X, typename Op, typename W>
void run(const mgo::aot::KernelArgs& args, const Sizes& z, const mgo::cpu::RowPlan& plan, float scale) {
  std::vector<double> row_loss(static_cast<size_t>(z.t1), 0.0);
  mgo::cpu::run_rows_with_key_grads<X>(
      Sli::kName, args, z.t1, z.t2, z.didx, OutParam::kDKeyIndex,
      [&] { return std::make_unique<RowKernel<X, Op, W>>(args, z, plan, scale); },
      [&](RowKernel<X, Op, W>& kernel, int64_t t, float* acc) { row_loss[t] = kernel.row(t, acc); }, In::kSinks);
  double loss = 0.0;
  for (double l : row_loss) loss += l;
  *args.as<float>(OutParam::kLoss) = static_cast<float>(loss);
}

}  // namespace

void mgo::cpu::kernels::sparse_lightning_indexer_grad_kl_loss(
    const aot::KernelArgs& args, const table::SparseLightningIndexerGradKLLoss::Attrs& attrs) {
  const bool bsnd = attrs.layout == table::Layout::kBSND;
  const int r = bsnd ? 4 : 3;
  Sizes z{};
  z.t1 = token_count(args, In::kQuery, bsnd);
  z.t2 = token_count(args, In::kKey, bsnd);
  z.n1 = args.dim(In::kQuery, r - 2);
  z.d = args.dim(In::kQuery, r - 1);
  z.dr = args.numel(In::kQueryRope) > 0 ? args.dim(In::kQueryRope, r - 1) : 0;
  z.dq = z.d + z.dr;
  z.nidx = args.dim(In::kQueryIndex, r - 2);
  z.didx = args.dim(In::kQueryIndex, r - 1);
  z.k = args.dim(In::kSparseIndices, r - 1);
  // A sink of -inf is no sink: with none above -inf the teacher is bitwise the one without sinks.
  const float* sinks = args.numel(In::kSinks) > 0 ? args.as<const float>(In::kSinks) : nullptr;
  z.renormalise = sinks != nullptr && std::any_of(sinks, sinks + z.n1, [](float x) {
                    return x != -std::numeric_limits<float>::infinity();
                  });
  const RowPlan plan = plan_rows(Sli::kName, args, bsnd, In::kQuery, In::kKey, In::kActualSeqLengthsQuery,
                                 In::kActualSeqLengthsKey, attrs.sparse_mode,
                                 Compression{attrs.cmp_ratio, In::kCmpResidualK});
  check_sparse_indices(Sli::kName, args.as<const int32_t>(In::kSparseIndices), z.t1, z.k, plan);
  const float scale = static_cast<float>(attrs.scale_value);
  dispatch_indexer(args, In::kQuery, In::kWeights, [&](auto x, auto op, auto w) {
    run<decltype(x), decltype(op), decltype(w)>(args, z, plan, scale);
  });
}
