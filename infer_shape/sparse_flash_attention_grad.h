// Shape rules of `sparse_flash_attention_grad` (docs/contract.md section 3, backward).
//
// Inputs: query, key, value, sparse_indices, d_out, out, softmax_max, softmax_sum,
// actual_seq_lengths_query, actual_seq_lengths_kv, query_rope, key_rope (value, lengths and ropes
// may be the absent placeholder). Outputs: d_query, d_key, d_value, d_query_rope, d_key_rope,
// each shaped and typed like its input: an absent input has an absent (zero-size) gradient, and
// with value absent d_key holds the fused gradient of the shared key/value.
#pragma once

#include <vector>

#include "sparse_flash_attention_rules.h"

namespace mgo::infer {

inline InferResult sparse_flash_attention_grad(const std::vector<TensorDesc>& in, const SfaAttrs& attrs) {
  const Checker c("sparse_flash_attention_grad");
  c.arity(in, 12);
  const Shape stats = check_sfa_inputs(c, {in[0], in[1], in[2], in[3], in[10], in[11], in[8], in[9]}, attrs);
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
  InferResult r;
  for (size_t i : {size_t{0}, size_t{1}, size_t{2}, size_t{10}, size_t{11}}) {
    r.shapes.push_back(in[i].shape);
    r.dtypes.push_back(in[i].dtype);
  }
  return r;
}

}  // namespace mgo::infer
