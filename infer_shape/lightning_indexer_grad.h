// Shape rules of `lightning_indexer_grad`, the gradient of lightning_indexer's sparse_values.
//
// Inputs (TND; BSND adds B, S): query_index [T1, Nidx, Didx], key_index [T2, 1, Didx], weights
// [T1, Nidx] (see lightning_indexer_rules.h), sparse_indices int32 [T1, 1, K], d_values float32 of
// the shape of sparse_indices, actual_seq_lengths_query/key and cmp_residual_k (placeholders when None).
// Attributes: layout, sparse_mode, cmp_ratio.
// Outputs: d_query_index, d_key_index, d_weights with the shapes and dtypes of their inputs.
#pragma once

#include <string>
#include <vector>

#include "cmp_residual_rules.h"
#include "lightning_indexer_rules.h"

namespace mgo::infer {

inline InferResult lightning_indexer_grad(const std::vector<TensorDesc>& in,
                                          const table::LightningIndexerGrad::Attrs& attrs) {
  using Op = table::LightningIndexerGrad;
  using In = Op::In;
  const Checker c(Op::kName);
  c.arity(in, Op::kNumInputs);
  const Layout l = attrs.layout;
  const TensorDesc &qi = in[In::kQueryIndex], &ki = in[In::kKeyIndex], &w = in[In::kWeights];
  const TensorDesc &si = in[In::kSparseIndices], &dv = in[In::kDValues];
  check_indexer_tensors(c, l, qi, ki, w);
  check_sparse_indices(c, l, si, "query_index", qi);
  c.same_shape("d_values", dv, "sparse_indices", si);
  if (dv.dtype != DType::kUnknown && dv.dtype != DType::kFloat32) {
    c.type_error(std::string("argument 'd_values' must be float32, got ") + dtype_name(dv.dtype));
  }
  check_seq_lengths(c, l == Layout::kBSND, in[In::kActualSeqLengthsQuery], in[In::kActualSeqLengthsKey],
                    "actual_seq_lengths_key", dim_or_unknown(qi, 0));
  check_cmp_residual(c, l == Layout::kBSND, in[In::kCmpResidualK], qi, in[In::kActualSeqLengthsQuery]);
  return {{qi.shape, ki.shape, w.shape}, {qi.dtype, ki.dtype, w.dtype}};
}

}  // namespace mgo::infer
