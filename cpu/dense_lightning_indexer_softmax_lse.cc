// CPU AOT kernel of `dense_lightning_indexer_softmax_lse` (docs/contract.md section 4.3): per query row, the max
// and the sum of exponentials of the lightning indexer's logits over all its visible keys.
//
// The logits are lightning_indexer's, bit for bit (the shared IndexScorer of lightning_indexer_common.h), one
// block of keys at a time with an online max/sum, so scratch is O(block) per thread, never O(S) or S x S.
// Each row belongs to one thread and its blocks run in key order: the same bits for any thread count.
// A row without a visible key (and a BSND padding row) gets 0 / 0 (section 0.6).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "lightning_indexer_common.h"
#include "op_kernels.h"

namespace {

using Lse = mgo::table::DenseLightningIndexerSoftmaxLse;
using In = Lse::In;
using OutParam = Lse::OutParam;

template <typename X, typename Op, typename W>
void run(const mgo::aot::KernelArgs& args, const mgo::cpu::RowPlan& plan, bool bsnd) {
  using Scorer = mgo::cpu::IndexScorer<X, Op, W>;
  const int r = bsnd ? 4 : 3;
  const int64_t t1 = mgo::cpu::token_count(args, In::kQueryIndex, bsnd);
  const int64_t t2 = mgo::cpu::token_count(args, In::kKeyIndex, bsnd);
  const int64_t nidx = args.dim(In::kQueryIndex, r - 2);
  const int64_t didx = args.dim(In::kQueryIndex, r - 1);
  const X* qi = args.as<const X>(In::kQueryIndex);
  const W* weights = args.as<const W>(In::kWeights);
  float* out_max = args.as<float>(OutParam::kSoftmaxMaxIndex);
  float* out_sum = args.as<float>(OutParam::kSoftmaxSumIndex);
  std::vector<Op> ki_conv;
  const Op* ki = Scorer::keys(args, In::kKeyIndex, t2 * didx, ki_conv);

  mgo::cpu::ParallelError error;
#pragma omp parallel
  {
    Scorer scorer(nidx, didx);
    std::vector<float> scores(static_cast<size_t>(Scorer::kBlock)), e(static_cast<size_t>(Scorer::kBlock));
#pragma omp for schedule(dynamic, 16)
    for (int64_t t = 0; t < t1; ++t) {
      error.guard([&] {
        const int64_t n = plan.limit[t];
        float m = -std::numeric_limits<float>::infinity();
        float sum = 0.0f;
        if (n > 0) scorer.load_row(qi + t * nidx * didx, weights + t * nidx);
        const Op* keys = ki + plan.key_base[t] * didx;
        for (int64_t c0 = 0; c0 < n; c0 += Scorer::kBlock) {
          const int64_t cols = std::min(Scorer::kBlock, n - c0);
          scorer.block(keys + c0 * didx, cols, scores.data());
          float block_max = m;
          for (int64_t j = 0; j < cols; ++j) block_max = std::max(block_max, scores[j]);
          // Rescale the running sum to the new max (exp(-inf - finite) = 0 for the first block).
          const float rescale = block_max == m ? 1.0f : std::exp(m - block_max);
          sum = sum * rescale + mgo::cpu::exp_shifted(scores.data(), cols, block_max, e.data());
          m = block_max;
        }
        out_max[t] = n > 0 ? m : 0.0f;
        out_sum[t] = sum;
      });
    }
  }
  error.rethrow(Lse::kName);
}

}  // namespace

void mgo::cpu::kernels::dense_lightning_indexer_softmax_lse(const aot::KernelArgs& args,
                                                            const table::DenseLightningIndexerSoftmaxLse::Attrs& attrs) {
  const bool bsnd = attrs.layout == table::Layout::kBSND;
  const RowPlan plan = plan_rows(Lse::kName, args, bsnd, In::kQueryIndex, In::kKeyIndex, In::kActualSeqLengthsQuery,
                                 In::kActualSeqLengthsKey, attrs.sparse_mode,
                                 Compression{attrs.cmp_ratio, In::kCmpResidualK});
  dispatch_indexer(args, In::kQueryIndex, In::kWeights, [&](auto x, auto op, auto w) {
    run<decltype(x), decltype(op), decltype(w)>(args, plan, bsnd);
  });
}
