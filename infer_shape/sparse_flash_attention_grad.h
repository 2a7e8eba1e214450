// Shape rules of `sparse_flash_attention_grad` (docs/contract.md section 3, backward).
//
// Inputs: query, key, value, sparse_indices, d_out, out, softmax_max, softmax_sum,
// actual_seq_lengths_query, actual_seq_lengths_kv, query_rope, key_rope, sinks (value, lengths,
// ropes and sinks may be the absent placeholder). Outputs: d_query, d_key, d_value, d_query_rope,
// d_key_rope, d_sinks, each shaped and typed like its input: an absent input has an absent
// (zero-size) gradient, and with value absent d_key holds the fused gradient of the shared key/value.
#pragma once

#include <vector>

#include "sparse_flash_attention_rules.h"

namespace mgo::infer {

// No attribute but layout changes shapes.
inline InferResult sparse_flash_attention_grad(const std::vector<TensorDesc>& in,
                                               const table::SparseFlashAttentionGrad::Attrs& attrs) {
  using Op = table::SparseFlashAttentionGrad;
  using In = Op::In;
  const Checker c(Op::kName);
  c.arity(in, Op::kNumInputs);
  const Shape stats = check_sfa_inputs(c, sfa_inputs<Op>(in), attrs.layout);
  const TensorDesc& q = in[In::kQuery];
  c.same_shape("d_out", in[In::kDOut], "query", q);
  c.same_shape("out", in[In::kOut], "query", q);
  c.same_dtype("d_out", in[In::kDOut], "query", q);
  c.same_dtype("out", in[In::kOut], "query", q);
  const TensorDesc want{stats, DType::kFloat32};
  for (int i : {In::kSoftmaxMax, In::kSoftmaxSum}) {
    const char* name = Op::kInputNames[i];
    c.rank(name, in[i], stats.size(), attrs.layout);
    c.same_shape(name, in[i], "the statistics shape", want);
    if (in[i].dtype != DType::kUnknown && in[i].dtype != DType::kFloat32) {
      c.type_error(std::string("argument '") + name + "' must be float32, got " + dtype_name(in[i].dtype));
    }
  }
  // Each gradient is shaped and typed like its input (Out order).
  InferResult r;
  for (int i : {In::kQuery, In::kKey, In::kValue, In::kQueryRope, In::kKeyRope}) {
    r.shapes.push_back(in[i].shape);
    r.dtypes.push_back(in[i].dtype);
  }
  r.shapes.push_back(in[In::kSinks].shape);  // d_sinks: float32 like sinks, absent with it
  r.dtypes.push_back(DType::kFloat32);
  return r;
}

}  // namespace mgo::infer
