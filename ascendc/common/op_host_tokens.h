// What every op_host of a sequence op (the attention and indexer ops) shares: the token geometry
// the pure tilings take (seq_tiling_common.h), read from a query-side and a key-side input in the
// op's layout (the platform as a mixed tiling takes it: CubeOf, op_host_platform.h).
// CANN-only like op_host_adapter.h; tests/ascend/test_ascendc_op_host.py runs it against tests/ascend/cann_stub.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "op_host_adapter.h"
#include "seq_tiling_common.h"

namespace mgo::op_host {

// Rank of the token tensors in `layout`: 4 in BSND ([B, S, N, D]), 3 in TND ([T, N, D]).
inline size_t TokenRank(mgo::table::Layout layout) { return layout == mgo::table::Layout::kBSND ? 4 : 3; }

// BSND: [B, S1, ...] / [B, S2, ...], with the bits of the per-batch lengths given (either alone);
// TND: [T1, ...] / [T2, ...] with batch = entries of the query lengths, 0 when they are absent (one
// sequence: the pure tilings lay it out as BSND B = 1).
inline mgo::tiling::SeqShape ReadTokens(mgo::table::Layout layout, const mgo::infer::TensorDesc& q,
                                        const mgo::infer::TensorDesc& k, const mgo::infer::TensorDesc& lens_q,
                                        const mgo::infer::TensorDesc& lens_kv) {
  if (layout == mgo::table::Layout::kBSND) {
    const uint64_t b = Dim(q, 0);
    const uint32_t lens = (mgo::infer::is_absent(lens_q.shape) ? 0 : mgo::tiling::kBsndLensQuery) |
                          (mgo::infer::is_absent(lens_kv.shape) ? 0 : mgo::tiling::kBsndLensKv);
    return {layout, b, Dim(q, 1), Dim(k, 1), b * Dim(q, 1), b * Dim(k, 1), lens};
  }
  const uint64_t batch = mgo::infer::is_absent(lens_q.shape) ? 0 : Dim(lens_q, 0);
  return {layout, batch, 0, 0, Dim(q, 0), Dim(k, 0)};
}

// The tokens of indexer op `Table` (its lengths: actual_seq_lengths_query / _key) from its inputs.
template <typename Table>
mgo::tiling::SeqShape ReadIndexerTokens(mgo::table::Layout layout, const mgo::infer::TensorDesc& q,
                                        const mgo::infer::TensorDesc& k,
                                        const std::vector<mgo::infer::TensorDesc>& in) {
  return ReadTokens(layout, q, k, in[Table::In::kActualSeqLengthsQuery], in[Table::In::kActualSeqLengthsKey]);
}

// Throws unless every tensor has the layout's rank; returns it.
inline size_t CheckTokenRank(mgo::table::Layout layout, std::initializer_list<const mgo::infer::TensorDesc*> tensors,
                             const char* names) {
  const size_t r = TokenRank(layout);
  for (const auto* t : tensors) {
    if (t->shape.size() != r) {
      throw std::invalid_argument(std::string(names) + " must have rank " + std::to_string(r) + " in " +
                                  mgo::table::Choice<mgo::table::Layout>::Name(layout));
    }
  }
  return r;
}

}  // namespace mgo::op_host
