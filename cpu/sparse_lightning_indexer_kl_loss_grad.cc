// CPU AOT kernel of `sparse_lightning_indexer_kl_loss_grad` (docs/contract.md section 9.2): CANN's V4
// indexer KL gradient against a target given per slot (attn_softmax_l1_norm), one pass per query row.
//
// Per row t with n valid slots (index >= 0 and visible under sparse_mode / cmp_ratio), their keys
// sorted ascending (the slot of each remembered for the per-slot input and output):
//   SxT = key_index x query_index^T, I = relu(SxT) . w, y = softmax(I)   -> softmax_out[slot]
//   dI  = y * sum(p) - p, loss_t = sum p (ln max(p, 1e-8) - ln max(y, 1e-8))
//   then the score backward of indexer_score_backward.h (shared with lightning_indexer_grad and the
//   V3.2 KL kernel), which also makes the key gradient deterministic.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "indexer_score_backward.h"
#include "op_kernels.h"

namespace {

using Kl = mgo::table::SparseLightningIndexerKLLossGrad;
using In = Kl::In;
using OutParam = Kl::OutParam;

constexpr float kLogFloor = 1e-8f;

using Sizes = mgo::cpu::IndexerGradSizes;

template <typename X, typename Op, typename W>
class RowKernel {
 public:
  RowKernel(const mgo::aot::KernelArgs& args, const Sizes& z, const mgo::cpu::RowPlan& plan)
      : a_(args), z_(z), plan_(plan), sb_(args, mgo::cpu::score_args_of<Kl>(), z.nidx, z.didx, z.k) {
    const auto kp = static_cast<size_t>(mgo::cpu::round_up(z.k, mgo::cpu::kScorePad));
    pairs_.reserve(static_cast<size_t>(z.k));
    slots_.reserve(static_cast<size_t>(z.k));
    score_.resize(kp);
    y_.resize(kp);
  }

  // Processes query row t; adds its key gradients to dk_acc [T2, Didx]; returns its loss.
  double row(int64_t t, float* dk_acc) {
    float* out = a_.as<float>(OutParam::kSoftmaxOut) + t * z_.k;
    std::fill(out, out + z_.k, 0.0f);
    collect_valid(t);
    const int64_t n = static_cast<int64_t>(slots_.size());
    if (n == 0) {  // no valid slot: the row contributes nothing
      sb_.empty_row(t);
      return 0.0;
    }
    sb_.scores(t);
    mgo::cpu::relu_weighted_sum_by_key(sb_.sxt(), n, z_.nidx, sb_.weights(), score_.data());
    float imax = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) imax = std::max(imax, score_[j]);
    const float zsum = mgo::cpu::exp_shifted(score_.data(), n, imax, y_.data());
    const float inv_z = 1.0f / zsum;
    const float log_z = std::log(zsum);
    const float log_floor = std::log(kLogFloor);
    const float* target = a_.as<const float>(In::kAttnSoftmaxL1Norm) + t * z_.k;
    double psum = 0.0;
    for (int64_t j = 0; j < n; ++j) psum += target[slots_[j]];
    const auto p_total = static_cast<float>(psum);
    double loss = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const float pj = target[slots_[j]];
      const float yj = y_[j] * inv_z;
      const float log_y = std::max(score_[j] - imax - log_z, log_floor);
      loss += static_cast<double>(pj * (std::log(std::max(pj, kLogFloor)) - log_y));
      out[slots_[j]] = yj;
      y_[j] = yj * p_total - pj;  // dI, in place of y
    }
    sb_.backward(t, y_.data(), dk_acc);
    return loss;
  }

 private:
  // The valid slots of row t and their global key rows, sorted by key row (indices already
  // range-checked): ascending rows make the gathers and the dK scatter forward sweeps.
  void collect_valid(int64_t t) {
    pairs_.clear();
    const int32_t* idx = a_.as<const int32_t>(In::kSparseIndices) + t * z_.k;
    for (int64_t s = 0; s < z_.k; ++s) {
      if (idx[s] >= 0 && idx[s] < plan_.limit[t]) pairs_.emplace_back(plan_.key_base[t] + idx[s], s);
    }
    std::sort(pairs_.begin(), pairs_.end());
    std::vector<int64_t>& keys = sb_.keys();
    keys.clear();
    slots_.clear();
    for (const auto& [key, slot] : pairs_) {
      keys.push_back(key);
      slots_.push_back(slot);
    }
  }

  const mgo::aot::KernelArgs& a_;
  const Sizes z_;
  const mgo::cpu::RowPlan& plan_;
  mgo::cpu::ScoreBackward<X, Op, W> sb_;
  std::vector<std::pair<int64_t, int64_t>> pairs_;  // (global key row, slot)
  std::vector<int64_t> slots_;                      // the slot of keys()[j]
  std::vector<float> score_, y_;
};

template <typename X, typename Op, typename W>
void run(const mgo::aot::KernelArgs& args, const Sizes& z, const mgo::cpu::RowPlan& plan) {
  std::vector<double> row_loss(static_cast<size_t>(z.t1), 0.0);
  mgo::cpu::run_rows_with_key_grads<X>(
      Kl::kName, args, z.t1, z.t2, z.didx, OutParam::kDKeyIndex,
      [&] { return std::make_unique<RowKernel<X, Op, W>>(args, z, plan); },
      [&](RowKernel<X, Op, W>& kernel, int64_t t, float* acc) { row_loss[t] = kernel.row(t, acc); });
  double loss = 0.0;
  for (double l : row_loss) loss += l;
  *args.as<float>(OutParam::kLoss) = static_cast<float>(loss);
}

}  // namespace

void mgo::cpu::kernels::sparse_lightning_indexer_kl_loss_grad(
    const aot::KernelArgs& args, const table::SparseLightningIndexerKLLossGrad::Attrs& attrs) {
  const mgo::cpu::IndexerGradLaunch g = mgo::cpu::plan_indexer_grad<Kl>(args, attrs);
  dispatch_indexer(args, In::kQueryIndex, In::kWeights, [&](auto x, auto op, auto w) {
    run<decltype(x), decltype(op), decltype(w)>(args, g.z, g.plan);
  });
}
