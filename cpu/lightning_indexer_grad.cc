// CPU AOT kernel of `lightning_indexer_grad`: the gradient of lightning_indexer's sparse_values,
// sparse_values[t, k] = I[t, j] = sum_g w[t, g] relu(query_index[t, g] . key_index[j]) with
// j = sparse_indices[t, k], with respect to query_index, key_index and weights.
//
// Inputs: query_index, key_index, weights, sparse_indices (int32), d_values (float32, shaped like
// sparse_indices), actual_seq_lengths_query, actual_seq_lengths_key (zero-size placeholders when
// None). Outputs: d_query_index, d_key_index, d_weights, shaped and typed like their inputs.
//
// Per query row: the selected slots whose key is visible (not -1, not hidden by sparse_mode) with
// dI = d_values of the slot (other slots are never read, so a NaN there does not propagate;
// duplicate indices each count), then the score backward of indexer_score_backward.h, shared with
// the KL kernel, which also makes the key gradient bitwise independent of the thread count.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "indexer_score_backward.h"
#include "op_kernels.h"

namespace {

using Lig = mgo::table::LightningIndexerGrad;
using In = Lig::In;
using OutParam = Lig::OutParam;

using Sizes = mgo::cpu::IndexerGradSizes;

template <typename X, typename Op, typename W>
class RowKernel {
 public:
  RowKernel(const mgo::aot::KernelArgs& args, const Sizes& z, const mgo::cpu::RowPlan& plan)
      : a_(args), z_(z), plan_(plan),
        sb_(args, mgo::cpu::score_args_of<Lig>(), z.nidx, z.didx, z.k) {
    order_.reserve(static_cast<size_t>(z.k));
    di_.resize(static_cast<size_t>(z.k));
  }

  // Processes query row t; adds its key gradients to dk_acc [T2, Didx].
  void row(int64_t t, float* dk_acc) {
    collect_visible(t);
    if (sb_.keys().empty()) {  // no visible selected key: the row contributes nothing
      sb_.empty_row(t);
      return;
    }
    sb_.scores(t);
    sb_.backward(t, di_.data(), dk_acc);
  }

 private:
  // The visible selected slots ordered by global key row, ties by slot (a total order, so the same
  // on every run): their key rows into sb_.keys() and their d_values into di_.
  void collect_visible(int64_t t) {
    order_.clear();
    const int32_t* idx = a_.as<const int32_t>(In::kSparseIndices) + t * z_.k;
    for (int64_t s = 0; s < z_.k; ++s) {
      if (idx[s] >= 0 && idx[s] < plan_.limit[t]) order_.emplace_back(plan_.key_base[t] + idx[s], s);
    }
    std::sort(order_.begin(), order_.end());
    const float* dv = a_.as<const float>(In::kDValues) + t * z_.k;
    std::vector<int64_t>& keys = sb_.keys();
    keys.clear();
    for (size_t i = 0; i < order_.size(); ++i) {
      keys.push_back(order_[i].first);
      di_[i] = dv[order_[i].second];
    }
  }

  const mgo::aot::KernelArgs& a_;
  const Sizes z_;
  const mgo::cpu::RowPlan& plan_;
  mgo::cpu::ScoreBackward<X, Op, W> sb_;
  std::vector<std::pair<int64_t, int64_t>> order_;
  std::vector<float> di_;
};

template <typename X, typename Op, typename W>
void run(const mgo::aot::KernelArgs& args, const Sizes& z, const mgo::cpu::RowPlan& plan) {
  mgo::cpu::run_rows_with_key_grads<X>(
      Lig::kName, args, z.t1, z.t2, z.didx, OutParam::kDKeyIndex,
      [&] { return std::make_unique<RowKernel<X, Op, W>>(args, z, plan); },
      [](RowKernel<X, Op, W>& kernel, int64_t t, float* acc) { kernel.row(t, acc); });
}

}  // namespace

void mgo::cpu::kernels::lightning_indexer_grad(const aot::KernelArgs& args,
                                               const table::LightningIndexerGrad::Attrs& attrs) {
  const mgo::cpu::IndexerGradLaunch g = mgo::cpu::plan_indexer_grad<Lig>(args, attrs);
  dispatch_indexer(args, In::kQueryIndex, In::kWeights, [&](auto x, auto op, auto w) {
    run<decltype(x), decltype(op), decltype(w)>(args, g.z, g.plan);
  });
}
