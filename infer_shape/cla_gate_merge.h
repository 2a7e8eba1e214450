// Shape rules of `cla_gate_merge` (docs/contract.md section 2), shared with `cla_gate_backward`.
//
// global_attn, local_attn [T, N, D]; global_gate_logits, local_gate_logits [T, N]; one float dtype.
#pragma once

#include <vector>

#include "common.h"
#include "op_table.h"

namespace mgo::infer {

// Checks the four forward inputs of `Op` (cla_gate_merge, or cla_gate_backward, which names them
// alike); returns the [T, N, D] descriptor.
template <class Op>
const TensorDesc& check_cla_gate_inputs(const Checker& c, const std::vector<TensorDesc>& in) {
  using In = typename Op::In;
  const TensorDesc& og = in[In::kGlobalAttn];
  const TensorDesc& ol = in[In::kLocalAttn];
  const TensorDesc& zg = in[In::kGlobalGateLogits];
  const TensorDesc& zl = in[In::kLocalGateLogits];
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

inline InferResult cla_gate_merge(const std::vector<TensorDesc>& in, const table::ClaGateMerge::Attrs& /*none*/) {
  const Checker c(table::ClaGateMerge::kName);
  c.arity(in, table::ClaGateMerge::kNumInputs);
  const TensorDesc& og = check_cla_gate_inputs<table::ClaGateMerge>(c, in);
  return {{og.shape}, {og.dtype}};
}

}  // namespace mgo::infer
