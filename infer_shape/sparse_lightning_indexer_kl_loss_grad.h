// Shape rules of `sparse_lightning_indexer_kl_loss_grad` (docs/contract.md section 9.2): CANN's V4
// SparseLightningIndexerKLLossGrad, the indexer's KL gradient against a target given as an input.
//
// Inputs (TND; BSND adds B, S): query_index [T1, Nidx, Didx], key_index [T2, 1, Didx], weights
// [T1, Nidx] (see lightning_indexer_rules.h), sparse_indices int32 [T1, 1, K], attn_softmax_l1_norm
// float32 shaped like sparse_indices, actual_seq_lengths_query/key and cmp_residual_k (placeholders
// when None). Attributes: layout, sparse_mode, cmp_ratio (no shape effect).
// Outputs: d_query_index, d_key_index, d_weights (shapes/dtypes of their inputs), softmax_out float32
// shaped like sparse_indices, loss float32 [1].
#pragma once

#include <vector>

#include "cmp_residual_rules.h"
#include "lightning_indexer_rules.h"

namespace mgo::infer {

inline InferResult sparse_lightning_indexer_kl_loss_grad(const std::vector<TensorDesc>& in,
                                                         const table::SparseLightningIndexerKLLossGrad::Attrs& attrs) {
  using Op = table::SparseLightningIndexerKLLossGrad;
  using In = Op::In;
  const Checker c(Op::kName);
  c.arity(in, Op::kNumInputs);
  const Layout l = attrs.layout;
  const TensorDesc &qi = in[In::kQueryIndex], &ki = in[In::kKeyIndex], &w = in[In::kWeights];
  const TensorDesc &si = in[In::kSparseIndices], &p = in[In::kAttnSoftmaxL1Norm];
  check_indexer_tensors(c, l, qi, ki, w);
  check_sparse_indices(c, l, si, "query_index", qi);
  c.same_shape("attn_softmax_l1_norm", p, "sparse_indices", si);
  check_float32(c, "attn_softmax_l1_norm", p);
  const TensorDesc& lens_q = in[In::kActualSeqLengthsQuery];
  check_seq_lengths(c, l == Layout::kBSND, lens_q, in[In::kActualSeqLengthsKey], "actual_seq_lengths_key",
                    dim_or_unknown(qi, 0));
  check_cmp_residual(c, l == Layout::kBSND, in[In::kCmpResidualK], qi, lens_q);
  return {{qi.shape, ki.shape, w.shape, si.shape, Shape{1}},
          {qi.dtype, ki.dtype, w.dtype, DType::kFloat32, DType::kFloat32}};
}

}  // namespace mgo::infer
