// Shape rules of `cla_gate_merge` (docs/contract.md section 2), shared with `cla_gate_backward`.
//
// global_attn, local_attn [T, N, D]; global_gate_logits, local_gate_logits [T, N]; one float dtype.
#pragma once

#include <vector>

#include "common.h"

namespace mgo::infer {

// Checks the four forward inputs starting at in[first]; returns the [T, N, D] descriptor.
inline const TensorDesc& check_cla_gate_inputs(const Checker& c, const std::vector<TensorDesc>& in, size_t first) {
  const TensorDesc& og = in[first];
  const TensorDesc& ol = in[first + 1];
  const TensorDesc& zg = in[first + 2];
  const TensorDesc& zl = in[first + 3];
  c.rank("global_attn", og, 3);
  c.same_shape("local_attn", ol, "global_attn", og);
  c.rank("global_gate_logits", zg, 2);
  c.same_shape("local_gate_logits", zl, "global_gate_logits", zg);
  c.positive("global_attn", og);
  if (rank_known(og.shape)) {
    c.dim("global_gate_logits", zg, 0, og.shape[0], "T of global_attn");
    c.dim("global_gate_logits", zg, 1, og.shape[1], "N of global_attn");
  }
  c.floating("global_attn", og);
  c.same_dtype("local_attn", ol, "global_attn", og);
  c.same_dtype("global_gate_logits", zg, "global_attn", og);
  c.same_dtype("local_gate_logits", zl, "global_attn", og);
  return og;
}

inline InferResult cla_gate_merge(const std::vector<TensorDesc>& in) {
  const Checker c("cla_gate_merge");
  c.arity(in, 4);
  const TensorDesc& og = check_cla_gate_inputs(c, in, 0);
  return {{og.shape}, {og.dtype}};
}

}  // namespace mgo::infer
