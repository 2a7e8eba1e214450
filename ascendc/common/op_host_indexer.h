// What the op_host descriptions of LightningIndexer and SparseLightningIndexerGradKLLoss share:
// the token geometry the pure tilings take, read from a query-side and a key-side input.
// CANN-only like op_host_adapter.h; tests/ascend/test_ascendc_op_host.py runs it against tests/ascend/cann_stub.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "op_host_adapter.h"
#include "sfa_tiling_common.h"

namespace mgo::op_host {

struct IndexerTokens {
  mgo::tiling::SfaLayout layout;
  uint64_t batch, s1, s2, t1, t2;
};

// BSND: [B, S1, ...] / [B, S2, ...]; TND: [T1, ...] / [T2, ...] with batch = entries of the
// query lengths, 0 when they are absent (one sequence: the pure tilings lay it out as BSND B = 1).
inline IndexerTokens ReadIndexerTokens(const std::string& layout, const mgo::infer::TensorDesc& q,
                                       const mgo::infer::TensorDesc& k, const mgo::infer::TensorDesc& lens_q) {
  if (layout == "BSND") {
    const uint64_t b = Dim(q, 0);
    return {mgo::tiling::SfaLayout::kBSND, b, Dim(q, 1), Dim(k, 1), b * Dim(q, 1), b * Dim(k, 1)};
  }
  const uint64_t batch = mgo::infer::is_absent(lens_q.shape) ? 0 : Dim(lens_q, 0);
  return {mgo::tiling::SfaLayout::kTND, batch, 0, 0, Dim(q, 0), Dim(k, 0)};
}

// The platform as the indexers' pure tilings take it.
inline mgo::tiling::CubePlatform IndexerCube(const Platform& p) {
  return {p.aicNum, p.ubBytes, p.l1Bytes, p.l0aBytes, p.l0bBytes, p.l0cBytes};
}

// Throws unless every tensor has the layout's rank (4 for BSND, 3 for TND).
inline size_t IndexerRank(const std::string& layout, std::initializer_list<const mgo::infer::TensorDesc*> tensors,
                          const char* names) {
  const size_t r = layout == "BSND" ? 4 : 3;
  for (const auto* t : tensors) {
    if (t->shape.size() != r) throw std::invalid_argument(std::string(names) + " must have rank " +
                                                          std::to_string(r) + " in " + layout);
  }
  return r;
}

}  // namespace mgo::op_host
