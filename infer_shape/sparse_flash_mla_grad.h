// Shape rules of `sparse_flash_mla_grad` (docs/contract.md section 8, backward).
//
// Inputs: query, d_out, out, softmax_lse, then the forward's other inputs in its order. Outputs: d_query,
// d_ori_kv, d_cmp_kv, d_sinks, each shaped and typed like its input (an absent cmp_kv or sinks has an absent
// gradient), and ori_softmax_l1_norm, cmp_softmax_l1_norm: float32 shaped like ori/cmp_sparse_indices (absent
// with them).
#pragma once

#include <string>
#include <vector>

#include "sparse_flash_mla_rules.h"

namespace mgo::infer {

inline InferResult sparse_flash_mla_grad(const std::vector<TensorDesc>& in,
                                         const table::SparseFlashMlaGrad::Attrs& attrs) {
  using Op = table::SparseFlashMlaGrad;
  using In = Op::In;
  const Checker c(Op::kName);
  c.arity(in, Op::kNumInputs);
  const Shape lse = check_smla_inputs(c, smla_inputs<Op>(in), attrs.layout);
  const TensorDesc& q = in[In::kQuery];
  for (int i : {In::kDOut, In::kOut}) {
    c.same_shape(Op::kInputNames[i], in[i], "query", q);
    c.same_dtype(Op::kInputNames[i], in[i], "query", q);
  }
  c.rank("softmax_lse", in[In::kSoftmaxLse], lse.size());
  c.same_shape("softmax_lse", in[In::kSoftmaxLse], "the softmax_lse shape", TensorDesc{lse, DType::kFloat32});
  if (in[In::kSoftmaxLse].dtype != DType::kUnknown && in[In::kSoftmaxLse].dtype != DType::kFloat32) {
    c.type_error(std::string("argument 'softmax_lse' must be float32, got ") + dtype_name(in[In::kSoftmaxLse].dtype));
  }
  return {{q.shape, in[In::kOriKv].shape, in[In::kCmpKv].shape, in[In::kSinks].shape,
           smla_l1_norm_shape(in[In::kOriSparseIndices]), smla_l1_norm_shape(in[In::kCmpSparseIndices])},
          {q.dtype, in[In::kOriKv].dtype, in[In::kCmpKv].dtype, DType::kFloat32, DType::kFloat32, DType::kFloat32}};
}

}  // namespace mgo::infer
