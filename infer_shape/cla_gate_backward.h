// Shape rules of `cla_gate_backward` (docs/contract.md section 2).
//
// grad_merged [T, N, D] plus the four inputs of `cla_gate_merge`, one float dtype.
// Outputs: grad_global_attn, grad_local_attn [T, N, D]; grad_global/local_gate_logits [T, N].
#pragma once

#include <string>
#include <vector>

#include "cla_gate_merge.h"

namespace mgo::infer {

// input_attn_layout (TND only) changes nothing; its readers parse it (op_table.h).
inline InferResult cla_gate_backward(const std::vector<TensorDesc>& in, const table::ClaGateBackward::Attrs&) {
  using Op = table::ClaGateBackward;
  const Checker c(Op::kName);
  c.arity(in, Op::kNumInputs);
  const TensorDesc& g = in[Op::In::kGradMerged];
  const TensorDesc& og = check_cla_gate_inputs<Op>(c, in);
  c.same_shape("grad_merged", g, "global_attn", og);
  c.same_dtype("grad_merged", g, "global_attn", og);
  const TensorDesc& zg = in[Op::In::kGlobalGateLogits];
  return {{og.shape, og.shape, zg.shape, zg.shape}, {og.dtype, og.dtype, og.dtype, og.dtype}};
}

}  // namespace mgo::infer
