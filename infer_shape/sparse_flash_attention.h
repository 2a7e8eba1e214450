// Shape rules of `sparse_flash_attention` (SPEC section 3, forward).
//
// Inputs (with rope): query, key, value, sparse_indices, query_rope, key_rope,
// actual_seq_lengths_query, actual_seq_lengths_kv; without rope the two rope tensors are left out.
// Outputs: out (shape/dtype of query), softmax_max, softmax_sum (float32 statistics).
#pragma once

#include <vector>

#include "sparse_flash_attention_common.h"

namespace mgo::infer {

inline InferResult sparse_flash_attention(const std::vector<TensorDesc>& in, const SfaAttrs& attrs) {
  const Checker c("sparse_flash_attention");
  if (in.size() != 8 && in.size() != 6) c.value_error("expected 8 inputs (6 without rope), got " + std::to_string(in.size()));
  const bool rope = in.size() == 8;
  SfaInputs s{in[0], in[1], in[2], in[3], in[rope ? 6 : 4], in[rope ? 7 : 5]};
  if (rope) {
    s.query_rope = &in[4];
    s.key_rope = &in[5];
  }
  const Shape stats = check_sfa_inputs(c, s, attrs);
  return {{in[0].shape, stats, stats}, {in[0].dtype, DType::kFloat32, DType::kFloat32}};
}

}  // namespace mgo::infer
