// What the lightning_indexer and lightning_indexer_grad harnesses share: the call's shape (one
// struct, mirrored by twin_lib.IndexerArgs), the platform it tiles for, and the host copies of
// the int32 cumulative TND lengths as the tilings read them.
#pragma once

#include <cstdint>
#include <vector>

#include "../../ascendc/common/sfa_tiling_common.h"

namespace harness {

struct IndexerArgs {
  int64_t layout;  // 0 BSND, 1 TND
  int64_t batch, s1, s2, t1, t2, n_idx, d_idx, k;
  int64_t sparse_mode, weights_f32;
  int64_t core_num, ub_bytes, seed;
};

inline mgo::tiling::IndexerShape ToIndexerShape(const IndexerArgs& a) {
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  return mgo::tiling::IndexerShape{a.layout == 1 ? mgo::tiling::SfaLayout::kTND : mgo::tiling::SfaLayout::kBSND,
                                   u(a.batch), u(a.s1), u(a.s2), u(a.t1), u(a.t2), u(a.n_idx), u(a.d_idx), u(a.k)};
}

inline mgo::tiling::CubePlatform IndexerPlatform(const IndexerArgs& a) {
  mgo::tiling::CubePlatform p = mgo::tiling::kAtlasA2Platform;
  p.aicNum = static_cast<uint32_t>(a.core_num);
  p.ubBytes = static_cast<uint64_t>(a.ub_bytes);
  return p;
}

inline bool IndexerHasLens(const IndexerArgs& a) { return a.layout == 1 && a.batch > 0; }

struct IndexerLens {
  std::vector<int64_t> q, kv;
  mgo::tiling::SfaSeqLengths view{nullptr, nullptr, 0};
  IndexerLens(const IndexerArgs& a, const int32_t* lq, const int32_t* lkv) {
    if (!IndexerHasLens(a) || lq == nullptr || lkv == nullptr) return;
    q.assign(lq, lq + a.batch);
    kv.assign(lkv, lkv + a.batch);
    view = mgo::tiling::SfaSeqLengths{q.data(), kv.data(), static_cast<uint64_t>(a.batch)};
  }
};

}  // namespace harness
