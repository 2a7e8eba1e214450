// Shape rules of `sparse_flash_attention` (docs/contract.md section 3, forward).
//
// Inputs: query, key, value, sparse_indices, query_rope, key_rope, actual_seq_lengths_query,
// actual_seq_lengths_kv (value, ropes and lengths may be the absent placeholder).
// Outputs: out (shape/dtype of query), softmax_max, softmax_sum (float32 statistics).
#pragma once

#include <vector>

#include "sparse_flash_attention_rules.h"

namespace mgo::infer {

inline InferResult sparse_flash_attention(const std::vector<TensorDesc>& in, const SfaAttrs& attrs) {
  const Checker c("sparse_flash_attention");
  c.arity(in, 8);
  const Shape stats = check_sfa_inputs(c, {in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7]}, attrs);
  return {{in[0].shape, stats, stats}, {in[0].dtype, DType::kFloat32, DType::kFloat32}};
}

}  // namespace mgo::infer
