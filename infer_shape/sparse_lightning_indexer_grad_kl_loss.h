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
  c.rank("query", q, r);
  c.rank("key", k, r);
  c.positive("query", q);
  c.dim("key", k, r - 2, 1, "the key head count N2");
  c.dim("key", k, r - 1, dim_or_unknown(q, r - 1), "D of 'query'");
  same_tokens(c, l, "key", k, "query", q, true);
  check_indexer_tensors(c, l, qi, ki, w);
  same_tokens(c, l, "query_index", qi, "query", q);
  same_tokens(c, l, "key_index", ki, "key", k);
  check_sparse_indices(c, l, si, "query", q);
  // Statistics: [1, T1, N1] or [B, 1, S1, N1].
  c.rank("softmax_max", mx, r);
  if (l == Layout::kTND) {
    c.dim("softmax_max", mx, 0, 1, "N2");
    c.dim("softmax_max", mx, 1, dim_or_unknown(q, 0), "T1 of 'query'");
  } else {
    c.dim("softmax_max", mx, 0, dim_or_unknown(q, 0), "B of 'query'");
    c.dim("softmax_max", mx, 1, 1, "N2");
    c.dim("softmax_max", mx, 2, dim_or_unknown(q, 1), "S1 of 'query'");
  }
  c.dim("softmax_max", mx, r - 1, dim_or_unknown(q, r - 2), "N1 of 'query'");
  c.same_shape("softmax_sum", sm, "softmax_max", mx);
  check_rope_pair(c, r, q, k, qr, kr);
  check_seq_lengths(c, l == Layout::kBSND, in[In::kActualSeqLengthsQuery], in[In::kActualSeqLengthsKey],
                    "actual_seq_lengths_key", dim_or_unknown(q, 0));
  check_sinks(c, in[In::kSinks], q, r);
  // Dtypes.
  c.floating("query", q);
  c.same_dtype("key", k, "query", q);
  c.same_dtype("query_index", qi, "query", q);
  for (const auto& [name, t] : {std::pair<const char*, const TensorDesc*>{"softmax_max", &mx}, {"softmax_sum", &sm}}) {
    if (t->dtype != DType::kUnknown && t->dtype != DType::kFloat32) {
      c.type_error(std::string("argument '") + name + "' must be float32, got " + dtype_name(t->dtype));
    }
  }
  return {{qi.shape, ki.shape, w.shape, Shape{1}}, {qi.dtype, ki.dtype, w.dtype, DType::kFloat32}};
}

}  // namespace mgo::infer
