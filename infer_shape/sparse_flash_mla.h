// Shape rules of `sparse_flash_mla` (docs/contract.md section 8, forward).
//
// Inputs: query, ori_kv, cmp_kv, ori_sparse_indices, cmp_sparse_indices, cu_seqlens_q, cu_seqlens_ori_kv,
// cu_seqlens_cmp_kv, seqused_q, seqused_ori_kv, seqused_cmp_kv, cmp_residual_kv, sinks (all but query and
// ori_kv may be the absent placeholder). Outputs: attn_out (shape/dtype of query), softmax_lse (float32).
#pragma once

#include <vector>

#include "sparse_flash_mla_rules.h"

namespace mgo::infer {

inline InferResult sparse_flash_mla(const std::vector<TensorDesc>& in, const table::SparseFlashMla::Attrs& attrs) {
  using Op = table::SparseFlashMla;
  const Checker c(Op::kName);
  c.arity(in, Op::kNumInputs);
  const Shape lse = check_smla_inputs(c, smla_inputs<Op>(in), attrs.layout);
  const TensorDesc& q = in[Op::In::kQuery];
  return {{q.shape, lse}, {q.dtype, DType::kFloat32}};
}

}  // namespace mgo::infer
