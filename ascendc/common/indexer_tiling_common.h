// What the tilings of the indexer ops share (lightning_indexer, lightning_indexer_grad,
// sparse_lightning_indexer_grad_kl_loss): the indexer's shape and the tiling key.
// Plain C++17 over <cstdint>: compiles for the host tiling, the device and the CPU twin.
#pragma once

#include <cstdint>

#include "seq_tiling_common.h"

namespace mgo::tiling {

// The indexer's shape: the tokens (seq), the indexer heads and head dim. (The slots per query
// token are lightning_indexer's attribute sparse_count, and the last dim of sparse_indices in the
// grad ops.)
struct IndexerShape {
  SeqShape seq;
  uint64_t nIdx;
  uint64_t dIdx;
  bool cmpResidual = false;  // cmp_residual_k given (docs/contract.md section 9.1; absent: every residual 0)
};

// Tiling key of the indexer ops: the I/O dtype, + 10 when weights are float32.
inline constexpr uint64_t IndexerTilingKey(DType dtype, bool weights_f32) {
  return static_cast<uint64_t>(dtype) + (weights_f32 ? 10u : 0u);
}

}  // namespace mgo::tiling
