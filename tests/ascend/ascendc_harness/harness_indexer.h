// What the lightning_indexer, lightning_indexer_grad and sparse_lightning_indexer_grad_kl_loss
// harnesses share: the tokens of a call (its shape struct, generated into harness_args.h, and the
// layout of its attributes), the platform a call tiles for, and the host copies of the int32
// cumulative TND lengths as the tilings read them.
#pragma once

#include <cstdint>
#include <vector>

#include "../../ascendc/common/indexer_tiling_common.h"
#include "harness_args.h"

namespace harness {

// The tokens of a call (IndexerArgs, SliArgs: the fields batch, s1, s2, t1, t2) in `layout`.
template <typename Args>
mgo::tiling::SeqShape Tokens(const Args& a, mgo::table::Layout layout) {
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  return mgo::tiling::SeqShape{layout, u(a.batch), u(a.s1), u(a.s2), u(a.t1), u(a.t2)};
}

// `residual`: cmp_residual_k is given (docs/contract.md section 9.1).
inline mgo::tiling::IndexerShape ToIndexerShape(const IndexerArgs& a, mgo::table::Layout layout,
                                                bool residual = false) {
  return {Tokens(a, layout), static_cast<uint64_t>(a.n_idx), static_cast<uint64_t>(a.d_idx), residual};
}

// Entries of cmp_residual_k: one per batch (B in BSND, the sequences in TND, 1 without lengths).
template <typename Args>
uint64_t ResidualCount(const Args& a) {
  return a.batch > 0 ? static_cast<uint64_t>(a.batch) : 1;
}

// The platform of a call (IndexerArgs, SliArgs: the fields arch, core_num, ub_bytes).
template <typename Args>
mgo::tiling::CubePlatform IndexerPlatform(const Args& a) {
  return harness::CubePlatformOf(a.arch, a.core_num, a.ub_bytes);
}

// Lengths are GM inputs only for TND with lengths (batch > 0).
template <typename Args>
bool IndexerHasLens(const Args& a, mgo::table::Layout layout) {
  return layout == mgo::table::Layout::kTND && a.batch > 0;
}

// Host copies of the int32 cumulative lengths as the tilings read them (int64).
struct IndexerLens {
  std::vector<int64_t> q, kv;
  mgo::tiling::SeqLengths view{nullptr, nullptr, 0};
  template <typename Args>
  IndexerLens(const Args& a, mgo::table::Layout layout, const int32_t* lq, const int32_t* lkv) {
    if (!IndexerHasLens(a, layout) || lq == nullptr || lkv == nullptr) return;
    q.assign(lq, lq + a.batch);
    kv.assign(lkv, lkv + a.batch);
    view = mgo::tiling::SeqLengths{q.data(), kv.data(), static_cast<uint64_t>(a.batch)};
  }
};

}  // namespace harness
