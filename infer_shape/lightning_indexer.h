// Shape rules of `lightning_indexer` (SPEC section 4, forward top-k selection).
//
// Inputs: query_index, key_index, weights (see lightning_indexer_common.h), actual_seq_lengths_query,
// actual_seq_lengths_key (placeholders when None). Attributes: sparse_count >= 1, layout, sparse_mode.
// Outputs: sparse_indices int32 and sparse_values float32, both [T1, 1, K] / [B, S1, 1, K].
#pragma once

#include <string>
#include <vector>

#include "lightning_indexer_common.h"

namespace mgo::infer {

inline InferResult lightning_indexer(const std::vector<TensorDesc>& in, int64_t sparse_count, const std::string& layout,
                                     int64_t sparse_mode) {
  const Checker c("lightning_indexer");
  c.arity(in, 5);
  const IndexerLayout l = parse_indexer_layout(c, layout);
  check_indexer_sparse_mode(c, sparse_mode);
  if (sparse_count < 1) c.value_error("attribute 'sparse_count' must be >= 1, got " + std::to_string(sparse_count));
  check_indexer_tensors(c, l, in[0], in[1], in[2]);
  check_seq_lengths(c, l == IndexerLayout::kBSND, in[3], in[4], "actual_seq_lengths_key");
  const Shape s = sparse_shape(l, in[0], sparse_count);
  return {{s, s}, {DType::kInt32, DType::kFloat32}};
}

}  // namespace mgo::infer
