// Shape rules of `sparse_flash_attention_grad` (SPEC section 3, backward).
//
// Inputs (with rope): query, key, value, sparse_indices, d_out, out, softmax_max, softmax_sum,
// actual_seq_lengths_query, actual_seq_lengths_kv, query_rope, key_rope; without rope the last two
// are left out. Outputs: d_query, d_key, d_value (+ d_query_rope, d_key_rope with rope), shaped
// and typed like their inputs.
#pragma once

#include <vector>

#include "sparse_flash_attention_common.h"

namespace mgo::infer {

inline InferResult sparse_flash_attention_grad(const std::vector<TensorDesc>& in, const SfaAttrs& attrs) {
  const Checker c("sparse_flash_attention_grad");
  if (in.size() != 12 && in.size() != 10) {
    c.value_error("expected 12 inputs (10 without rope), got " + std::to_string(in.size()));
  }
  const bool rope = in.size() == 12;
  SfaInputs s{in[0], in[1], in[2], in[3], in[8], in[9]};
  if (rope) {
    s.query_rope = &in[10];
    s.key_rope = &in[11];
  }
  const Shape stats = check_sfa_inputs(c, s, attrs);
  c.same_shape("d_out", in[4], "query", in[0]);
  c.same_shape("out", in[5], "query", in[0]);
  c.same_dtype("d_out", in[4], "query", in[0]);
  c.same_dtype("out", in[5], "query", in[0]);
  const TensorDesc want{stats, DType::kFloat32};
  for (size_t i : {size_t{6}, size_t{7}}) {
    const char* name = i == 6 ? "softmax_max" : "softmax_sum";
    c.rank(name, in[i], stats.size());
    c.same_shape(name, in[i], "the statistics shape", want);
    if (in[i].dtype != DType::kUnknown && in[i].dtype != DType::kFloat32) {
      c.type_error(std::string("argument '") + name + "' must be float32, got " + dtype_name(in[i].dtype));
    }
  }
  InferResult r{{in[0].shape, in[1].shape, in[2].shape}, {in[0].dtype, in[1].dtype, in[2].dtype}};
  if (rope) {
    r.shapes.push_back(in[10].shape);
    r.shapes.push_back(in[11].shape);
    r.dtypes.push_back(in[10].dtype);
    r.dtypes.push_back(in[11].dtype);
  }
  return r;
}

}  // namespace mgo::infer
