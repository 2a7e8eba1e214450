// Shape rules of `rope` (docs/contract.md section 1), shared with `rope_grad`.
//
// Inputs: x0, x1 [n_tokens, hidden] (hidden = 128 * heads, one dtype), cos, sin
// [max_seq_len, 128] (one float dtype, may differ from x), q_seq_len [batch] int32/int64.
// Outputs: two tensors shaped and typed like x0. The values of q_seq_len (sum == n_tokens,
// 0 < len <= max_seq_len) are checked where they are known: eagerly in Python, and in the kernel.
#pragma once

#include <string>
#include <vector>

#include "common.h"
#include "op_table.h"

namespace mgo::infer {

constexpr int64_t kRopeHeadSize = 128;

// The rules of `rope` and `rope_grad` (table::Rope / table::RopeGrad): inputs x0 and x1 at slots
// `x0_slot`/`x1_slot` (q/k, or q_grad/k_grad), then cos, sin and q_seq_len, named alike in both.
template <class Op>
InferResult rope_family(const std::vector<TensorDesc>& in, int x0_slot, int x1_slot) {
  using In = typename Op::In;
  const Checker c(Op::kName);
  c.arity(in, Op::kNumInputs);
  const char* x0 = Op::kInputNames[x0_slot];
  const char* x1 = Op::kInputNames[x1_slot];
  const TensorDesc& a = in[x0_slot];
  const TensorDesc& b = in[x1_slot];
  const TensorDesc& cos = in[In::kCos];
  const TensorDesc& sin = in[In::kSin];
  const TensorDesc& lens = in[In::kQSeqLen];
  c.rank(x0, a, 2);
  c.rank("cos", cos, 2);
  c.rank("q_seq_len", lens, 1);
  c.same_shape(x1, b, x0, a);
  c.same_shape("sin", sin, "cos", cos);
  c.positive(x0, a);
  c.positive("cos", cos);
  c.positive("q_seq_len", lens);
  if (rank_known(a.shape) && known(a.shape[1]) && a.shape[1] % kRopeHeadSize != 0) {
    c.value_error(std::string("argument '") + x0 + "' hidden size must be a multiple of 128, got shape " +
                  shape_str(a.shape));
  }
  c.dim("cos", cos, 1, kRopeHeadSize, "head size");
  c.floating(x0, a);
  c.same_dtype(x1, b, x0, a);
  c.floating("cos", cos);
  c.same_dtype("sin", sin, "cos", cos);
  c.integer("q_seq_len", lens);
  return {{a.shape, a.shape}, {a.dtype, a.dtype}};
}

inline InferResult rope(const std::vector<TensorDesc>& in, const table::Rope::Attrs& /*no attributes*/) {
  using In = table::Rope::In;
  return rope_family<table::Rope>(in, In::kQ, In::kK);
}

}  // namespace mgo::infer
