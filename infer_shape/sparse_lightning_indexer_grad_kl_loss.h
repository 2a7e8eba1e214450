// Shape rules of `sparse_lightning_indexer_grad_kl_loss` (docs/contract.md section 4.2).
//
// Inputs (TND; BSND adds B, S): query [T1, N1, D], key [T2, 1, D], query_index [T1, Nidx, Didx],
// key_index [T2, 1, Didx], weights [T1, Nidx], sparse_indices int32 [T1, 1, K], softmax_max and
// softmax_sum float32 [1, T1, N1] (BSND [B, 1, S1, N1]), query_rope [T1, N1, Dr] and key_rope
// [T2, 1, Dr] (both or neither; placeholders when None), actual_seq_lengths_query/key, sinks
// float32 [N1] (optional).
// query/key/query_index/key_index/ropes share one float dtype; weights that dtype or float32.
// Outputs: d_query_index, d_key_index, d_weights (shapes/dtypes of their inputs), loss float32 [1].
#pragma once

#include <string>
#include <vector>

#include "cmp_residual_rules.h"
#include "lightning_indexer_rules.h"
#include "rope_pair.h"
#include "sinks_rules.h"

namespace mgo::infer {

// scale_value and deterministic do not change shapes.
inline InferResult sparse_lightning_indexer_grad_kl_loss(const std::vector<TensorDesc>& in,
                                                         const table::SparseLightningIndexerGradKLLoss::Attrs& attrs) {
  using Op = table::SparseLightningIndexerGradKLLoss;
  using In = Op::In;
  const Checker c(Op::kName);
  c.arity(in, Op::kNumInputs);
  const Layout l = attrs.layout;
  const TensorDesc &q = in[In::kQuery], &k = in[In::kKey], &qi = in[In::kQueryIndex], &ki = in[In::kKeyIndex];
  const TensorDesc &w = in[In::kWeights], &si = in[In::kSparseIndices], &mx = in[In::kSoftmaxMax];
  const TensorDesc &sm = in[In::kSoftmaxSum], &qr = in[In::kQueryRope], &kr = in[In::kKeyRope];
  const size_t r = token_rank(l);
  c.rank("query", q, r, l);
  c.rank("key", k, r, l);
  c.positive("query", q);
  c.dim("key", k, r - 2, 1, "the key head count N2");
  c.dim("key", k, r - 1, dim_or_unknown(q, r - 1), "D of 'query'");
  same_tokens(c, l, "key", k, "query", q, true);
  check_indexer_tensors(c, l, qi, ki, w);
  same_tokens(c, l, "query_index", qi, "query", q);
  same_tokens(c, l, "key_index", ki, "key", k);
  check_sparse_indices(c, l, si, "query", q);
  check_attention_stats(c, l, mx, sm, q, 1);  // [1, T1, N1] or [B, 1, S1, N1]
  check_rope_pair(c, l, q, k, qr, kr);
  check_seq_lengths(c, l == Layout::kBSND, in[In::kActualSeqLengthsQuery], in[In::kActualSeqLengthsKey],
                    "actual_seq_lengths_key", dim_or_unknown(q, 0));
  check_cmp_residual(c, l == Layout::kBSND, in[In::kCmpResidualK], q, in[In::kActualSeqLengthsQuery]);
  check_sinks(c, in[In::kSinks], q, r);
  // Dtypes.
  c.floating("query", q);
  c.same_dtype("key", k, "query", q);
  c.same_dtype("query_index", qi, "query", q);
  return {{qi.shape, ki.shape, w.shape, Shape{1}}, {qi.dtype, ki.dtype, w.dtype, DType::kFloat32}};
}

}  // namespace mgo::infer
