// Shape rules of `dense_lightning_indexer_softmax_lse` (docs/contract.md section 4.3): the max and the sum of
// exponentials of the lightning indexer's logits over each query row's visible keys.
//
// Inputs: query_index, key_index, weights (lightning_indexer_rules.h), actual_seq_lengths_query,
// actual_seq_lengths_key (placeholders when None). Attributes: layout, sparse_mode.
// Outputs: softmax_max_index and softmax_sum_index, float32 [1, T1] (TND) / [B, 1, S1] (BSND), CANN's shapes.
#pragma once

#include <vector>

#include "cmp_residual_rules.h"
#include "lightning_indexer_rules.h"

namespace mgo::infer {

inline InferResult dense_lightning_indexer_softmax_lse(const std::vector<TensorDesc>& in,
                                                       const table::DenseLightningIndexerSoftmaxLse::Attrs& attrs) {
  using Op = table::DenseLightningIndexerSoftmaxLse;
  using In = Op::In;
  const Checker c(Op::kName);
  c.arity(in, Op::kNumInputs);
  const Layout l = attrs.layout;
  const TensorDesc& qi = in[In::kQueryIndex];
  check_indexer_tensors(c, l, qi, in[In::kKeyIndex], in[In::kWeights]);
  check_seq_lengths(c, l == Layout::kBSND, in[In::kActualSeqLengthsQuery], in[In::kActualSeqLengthsKey],
                    "actual_seq_lengths_key", dim_or_unknown(qi, 0));
  check_cmp_residual(c, l == Layout::kBSND, in[In::kCmpResidualK], qi, in[In::kActualSeqLengthsQuery]);
  const Shape s = index_stats_shape(l, qi);
  return {{s, s}, {DType::kFloat32, DType::kFloat32}};
}

}  // namespace mgo::infer
