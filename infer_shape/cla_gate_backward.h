// Shape rules of `cla_gate_backward` (docs/contract.md section 2).
//
// grad_merged [T, N, D] plus the four inputs of `cla_gate_merge`, one float dtype.
// Outputs: grad_global_attn, grad_local_attn [T, N, D]; grad_global/local_gate_logits [T, N].
#pragma once

#include <string>
#include <vector>

#include "cla_gate_merge.h"

namespace mgo::infer {

inline InferResult cla_gate_backward(const std::vector<TensorDesc>& in, const std::string& input_attn_layout) {
  const Checker c("cla_gate_backward");
  if (input_attn_layout != "TND") {
    c.value_error("attribute 'input_attn_layout' must be \"TND\", got \"" + input_attn_layout + "\"");
  }
  c.arity(in, 5);
  const TensorDesc& g = in[0];
  const TensorDesc& og = check_cla_gate_inputs(c, in, 1);
  c.same_shape("grad_merged", g, "global_attn", og);
  c.same_dtype("grad_merged", g, "global_attn", og);
  const TensorDesc& zg = in[3];
  return {{og.shape, og.shape, zg.shape, zg.shape}, {og.dtype, og.dtype, og.dtype, og.dtype}};
}

}  // namespace mgo::infer
