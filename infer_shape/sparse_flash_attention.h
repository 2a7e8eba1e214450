// Shape rules of `sparse_flash_attention` (docs/contract.md section 3, forward).
//
// Inputs: query, key, value, sparse_indices, query_rope, key_rope, actual_seq_lengths_query,
// actual_seq_lengths_kv, sinks (value, ropes, lengths and sinks may be the absent placeholder).
// Outputs: out (shape/dtype of query), softmax_max, softmax_sum (float32 statistics).
#pragma once

#include <vector>

#include "sparse_flash_attention_rules.h"

namespace mgo::infer {

inline InferResult sparse_flash_attention(const std::vector<TensorDesc>& in,
                                          const table::SparseFlashAttention::Attrs& attrs) {
  using Op = table::SparseFlashAttention;
  const Checker c(Op::kName);
  c.arity(in, Op::kNumInputs);
  const Shape stats = check_sfa_inputs(c, sfa_inputs<Op>(in), attrs.layout);
  const TensorDesc& q = in[Op::In::kQuery];
  return {{q.shape, stats, stats}, {q.dtype, DType::kFloat32, DType::kFloat32}};
}

}  // namespace mgo::infer
