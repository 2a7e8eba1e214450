// What the lightning_indexer, lightning_indexer_grad and sparse_lightning_indexer_grad_kl_loss
// harnesses share: the tokens of a call (its shape struct, generated into harness_args.h, and the
// layout of its attributes), the platform a call tiles for, and its int32 lengths (TND cumulative,
// BSND per batch) as GM inputs and as the tilings read them.
#pragma once

#include <cstdint>
#include <vector>

#include "../../ascendc/common/indexer_tiling_common.h"
#include "harness_args.h"
#include "harness_common.h"

namespace harness {

// The lengths of a call as the harness has them: int32 GM inputs (TND: cumulative, both or
// neither, given when batch > 0; BSND: per batch, each side given when its pointer is), and their
// host copies as the tilings read them (int64), unless the lengths are hidden from the tiling
// (LengthsHidden: the split is then by rows, as on the device).
struct IndexerLens {
  bool q = false;  // actual_seq_lengths_query is a GM input
  bool kv = false;
  uint32_t bsndLens = 0;
  std::vector<int64_t> hostQ, hostKv;
  mgo::tiling::SeqLengths view{nullptr, nullptr, 0};
  template <typename Args>
  IndexerLens(const Args& a, mgo::table::Layout layout, const int32_t* lq, const int32_t* lkv) {
    if (layout == mgo::table::Layout::kTND) {
      q = kv = a.batch > 0 && lq != nullptr && lkv != nullptr;
    } else {
      q = lq != nullptr;
      kv = lkv != nullptr;
      bsndLens = (q ? mgo::tiling::kBsndLensQuery : 0) | (kv ? mgo::tiling::kBsndLensKv : 0);
    }
    if ((!q && !kv) || LengthsHidden()) return;
    if (q) hostQ.assign(lq, lq + a.batch);
    if (kv) hostKv.assign(lkv, lkv + a.batch);
    view = mgo::tiling::SeqLengths{q ? hostQ.data() : nullptr, kv ? hostKv.data() : nullptr,
                                   static_cast<uint64_t>(a.batch)};
  }
  // Registers the given lengths as GM inputs of a launch.
  template <typename Args>
  void Register(GmScope& gm, const Args& a, const int32_t* lq, const int32_t* lkv) const {
    if (q) gm.Input(lq, a.batch * 4, "actual_seq_lengths_query");
    if (kv) gm.Input(lkv, a.batch * 4, "actual_seq_lengths_key");
  }
  // The kernel's GM_ADDR of the query (or key) lengths: null when not given.
  GM_ADDR Q(const int32_t* lq) const { return q ? reinterpret_cast<GM_ADDR>(const_cast<int32_t*>(lq)) : nullptr; }
  GM_ADDR Kv(const int32_t* lkv) const {
    return kv ? reinterpret_cast<GM_ADDR>(const_cast<int32_t*>(lkv)) : nullptr;
  }
};

// The tokens of a call (IndexerArgs, SliArgs: the fields batch, s1, s2, t1, t2) in `layout`.
template <typename Args>
mgo::tiling::SeqShape Tokens(const Args& a, mgo::table::Layout layout, const IndexerLens& lens) {
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  return mgo::tiling::SeqShape{layout, u(a.batch), u(a.s1), u(a.s2), u(a.t1), u(a.t2), lens.bsndLens};
}

// `residual`: cmp_residual_k is given (docs/contract.md section 9.1).
inline mgo::tiling::IndexerShape ToIndexerShape(const IndexerArgs& a, mgo::table::Layout layout,
                                                const IndexerLens& lens, bool residual = false) {
  return {Tokens(a, layout, lens), static_cast<uint64_t>(a.n_idx), static_cast<uint64_t>(a.d_idx), residual};
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

}  // namespace harness
