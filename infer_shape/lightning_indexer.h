// Shape rules of `lightning_indexer` (docs/contract.md section 4.1, forward top-k selection).
//
// Inputs: query_index, key_index, weights (see lightning_indexer_rules.h), actual_seq_lengths_query,
// actual_seq_lengths_key, cmp_residual_k (placeholders when None). Attributes: sparse_count (the size rule
// below), layout, sparse_mode, cmp_ratio (compressed keys, docs/contract.md section 9.1). Outputs: sparse_indices int32 and sparse_values float32, both [T1, 1, K] / [B, S1, 1, K].
//
// Size rule for sparse_count = K. MindSpore allocates both outputs, T1 * K slots of 8 bytes together, before
// the kernel runs, so a K nothing can hold used to end in its "Allocate output memory failed". K beyond a
// row's visible keys only adds -1 padding, and no model selects more than a million keys per row, hence:
//   K within sparse_count's domain in the table (512 times DeepSeek-V3.2's 2048 at most; to select
//        every visible key, pass the longest key sequence's length, not 2**31 - 1), checked by every
//        reader of the attributes (op_table.h), and
//   T1 * K <= kMaxSparseSlots = 2**31 - 1 where T1 is known (B * S1 in BSND): each output stays
//        int32-indexable (at most 16 GiB together), checked here.
// Either is a ValueError naming the op and sparse_count, eagerly, at GRAPH compile, and at run time when a
// dynamic T1 becomes known.
#pragma once

#include <string>
#include <vector>

#include "cmp_residual_rules.h"
#include "lightning_indexer_rules.h"

namespace mgo::infer {

constexpr int64_t kMaxSparseSlots = kMaxInt32;

// T1 * K <= kMaxSparseSlots once T1 (the token dims of query_index) is known.
inline void check_sparse_slots(const Checker& c, Layout l, const TensorDesc& qi, int64_t sparse_count) {
  int64_t t1 = 1;
  for (size_t i = 0; i < token_dims(l); ++i) {
    const int64_t d = dim_or_unknown(qi, i);
    if (!known(d)) return;
    if (t1 > kMaxSparseSlots) break;  // already too many; stops before the product could overflow
    t1 *= d;
  }
  if (t1 > kMaxSparseSlots / sparse_count) {
    c.value_error("attribute 'sparse_count' = " + std::to_string(sparse_count) + " gives outputs sparse_indices/" +
                  "sparse_values of " + std::to_string(t1) + " x " + std::to_string(sparse_count) +
                  " slots each for 'query_index' " + shape_str(qi.shape) + ", more than " +
                  std::to_string(kMaxSparseSlots) + " (int32-indexable); lower sparse_count or split the tokens");
  }
}

inline InferResult lightning_indexer(const std::vector<TensorDesc>& in, const table::LightningIndexer::Attrs& attrs) {
  using Op = table::LightningIndexer;
  using In = Op::In;
  const Checker c(Op::kName);
  c.arity(in, Op::kNumInputs);
  const Layout l = attrs.layout;
  const TensorDesc& qi = in[In::kQueryIndex];
  check_indexer_tensors(c, l, qi, in[In::kKeyIndex], in[In::kWeights]);
  check_sparse_slots(c, l, qi, attrs.sparse_count);
  check_seq_lengths(c, l == Layout::kBSND, in[In::kActualSeqLengthsQuery], in[In::kActualSeqLengthsKey],
                    "actual_seq_lengths_key", dim_or_unknown(qi, 0));
  check_cmp_residual(c, l == Layout::kBSND, in[In::kCmpResidualK], qi, in[In::kActualSeqLengthsQuery]);
  const Shape s = sparse_shape(l, qi, attrs.sparse_count);
  return {{s, s}, {DType::kInt32, DType::kFloat32}};
}

}  // namespace mgo::infer
