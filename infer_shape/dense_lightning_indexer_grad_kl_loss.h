// Shape rules of `dense_lightning_indexer_grad_kl_loss` (docs/contract.md section 4.4): the indexer's KL loss to
// the dense main attention and its gradients, over every visible key (no indices).
//
// Inputs (TND; BSND adds B, S): query [T1, N1, D], key [T2, N2, D] with N2 = 1 (MLA-absorbed MQA, as
// sparse_flash_attention) or N2 = N1 (plain MHA, CANN's), query_index [T1, Nidx, Didx], key_index [T2, 1, Didx],
// weights [T1, Nidx], softmax_max and softmax_sum float32 [N2, T1, G] (BSND [B, N2, S1, G]), G = N1 / N2,
// softmax_max_index and softmax_sum_index float32 [1, T1] (BSND [B, 1, S1]; dense_lightning_indexer_softmax_lse's
// outputs), query_rope [T1, N1, Dr] and key_rope [T2, N2, Dr] (both or neither), actual_seq_lengths_query/key.
// query/key/query_index/key_index/ropes share one float dtype; weights that dtype or float32.
// Outputs: d_query_index, d_key_index, d_weights (shapes/dtypes of their inputs), loss float32 [1].
#pragma once

#include <string>
#include <vector>

#include "cmp_residual_rules.h"
#include "lightning_indexer_rules.h"
#include "rope_pair.h"

namespace mgo::infer {

// scale_value and deterministic do not change shapes.
inline InferResult dense_lightning_indexer_grad_kl_loss(const std::vector<TensorDesc>& in,
                                                        const table::DenseLightningIndexerGradKLLoss::Attrs& attrs) {
  using Op = table::DenseLightningIndexerGradKLLoss;
  using In = Op::In;
  const Checker c(Op::kName);
  c.arity(in, Op::kNumInputs);
  const Layout l = attrs.layout;
  const TensorDesc &q = in[In::kQuery], &k = in[In::kKey], &qi = in[In::kQueryIndex], &ki = in[In::kKeyIndex];
  const TensorDesc& w = in[In::kWeights];
  const size_t r = token_rank(l);
  c.rank("query", q, r, l);
  c.rank("key", k, r, l);
  c.positive("query", q);
  c.positive("key", k);
  const int64_t n1 = dim_or_unknown(q, r - 2);
  const int64_t n2 = dim_or_unknown(k, r - 2);
  if (known(n1) && known(n2) && n2 != 1 && n2 != n1) {
    c.value_error("argument 'key' dim " + std::to_string(r - 2) + " (N2) must be 1 (MQA) or N1 = " +
                  std::to_string(n1) + " of 'query' (MHA), got shape " + shape_str(k.shape));
  }
  c.dim("key", k, r - 1, dim_or_unknown(q, r - 1), "D of 'query'");
  same_tokens(c, l, "key", k, "query", q, true);
  check_indexer_tensors(c, l, qi, ki, w);
  same_tokens(c, l, "query_index", qi, "query", q);
  same_tokens(c, l, "key_index", ki, "key", k);
  check_attention_stats(c, l, in[In::kSoftmaxMax], in[In::kSoftmaxSum], q, n2);
  // The indexer's statistics: [1, T1] or [B, 1, S1].
  const TensorDesc &mxi = in[In::kSoftmaxMaxIndex], &smi = in[In::kSoftmaxSumIndex];
  c.rank("softmax_max_index", mxi, r - 1, l);
  if (l == Layout::kTND) {
    c.dim("softmax_max_index", mxi, 0, 1, "N2 of the indexer");
    c.dim("softmax_max_index", mxi, 1, dim_or_unknown(q, 0), "T1 of 'query'");
  } else {
    c.dim("softmax_max_index", mxi, 0, dim_or_unknown(q, 0), "B of 'query'");
    c.dim("softmax_max_index", mxi, 1, 1, "N2 of the indexer");
    c.dim("softmax_max_index", mxi, 2, dim_or_unknown(q, 1), "S1 of 'query'");
  }
  c.same_shape("softmax_sum_index", smi, "softmax_max_index", mxi);
  check_float32(c, "softmax_max_index", mxi);
  check_float32(c, "softmax_sum_index", smi);
  check_rope_pair(c, l, q, k, in[In::kQueryRope], in[In::kKeyRope]);
  check_seq_lengths(c, l == Layout::kBSND, in[In::kActualSeqLengthsQuery], in[In::kActualSeqLengthsKey],
                    "actual_seq_lengths_key", dim_or_unknown(q, 0));
  check_cmp_residual(c, l == Layout::kBSND, in[In::kCmpResidualK], q, in[In::kActualSeqLengthsQuery]);
  c.floating("query", q);
  c.same_dtype("key", k, "query", q);
  c.same_dtype("query_index", qi, "query", q);
  return {{qi.shape, ki.shape, w.shape, Shape{1}}, {qi.dtype, ki.dtype, w.dtype, DType::kFloat32}};
}

}  // namespace mgo::infer
