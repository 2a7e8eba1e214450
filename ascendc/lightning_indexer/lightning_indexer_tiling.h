// Pure tiling of LightningIndexer (mixed kernel: the cube computes Sx = q_index k_indexᵀ, the
// vector cores the scores I = sum_g w_g relu(Sx[g]) and the top-k selection).
// Work unit: a query token; tokens are split over the AIVs in contiguous ranges balanced by their
// visible-key counts (+16 per token). A token's visible keys (a prefix of its batch's keys) are
// scored in chunks of keyChunk (a multiple of 32, at most 512): Sort32 orders each 32-key group,
// and a scalar merge folds the groups into the running top-k (descending score, ties to the
// lower index) kept in UB.
// Plain C++17 over <cstdint>: compiles for the host tiling, the device and the CPU twin.
#pragma once

#include <cstdint>

#include "../common/sfa_tiling_common.h"

namespace mgo::tiling {

inline constexpr uint32_t kLiMaxKeyChunk = 512;
inline constexpr uint32_t kLiSortGroup = 32;  // Sort32 elements per repeat

inline constexpr uint64_t LightningIndexerTilingKey(DType dtype, bool weights_f32) {
  return IndexerTilingKey(dtype, weights_f32);
}

using LiShape = IndexerShape;  // k = sparse_count

struct LiTilingData {
  uint32_t layout;
  uint32_t sparseMode;
  uint32_t batch;
  uint32_t s1;
  uint32_t s2;
  uint32_t t1;
  uint32_t t2;
  uint32_t nIdx;
  uint32_t dIdx;
  uint32_t k;
  uint32_t kPad;        // AlignUp(k, 8): UB length of the top-k lists
  uint32_t usedAicNum;  // blockDim of the mixed launch
  uint32_t aivNum;
  uint32_t keyChunk;    // keys per chunk, a multiple of 32
  uint64_t aivWsBytes;
  uint64_t wsSx;        // per AIV [nIdx, keyChunk] float32
  uint64_t workspaceBytes;
  SfaMatmulTiling mmSx;  // Sx = q_index Kiᵀ
  uint32_t rowStart[kSfaMaxAiv + 1];
};

struct LiTilingResult {
  bool ok;
  const char* error;
  LiTilingData data;
  uint64_t workspaceBytes;
  uint64_t ubBytes;
};

// Every UB buffer the kernel allocates (exactly these).
struct LiUbPlan {
  uint32_t chunkBytes;   // [keyChunk] float32: scores; also Sx row, scratch (kChunkBufs of them)
  uint32_t indexBytes;   // [keyChunk] uint32 indices for Sort32
  uint32_t sortedBytes;  // [2 * keyChunk] float32: Sort32 output (score, index) pairs
  uint32_t topBytes;     // [kPad] 4-byte: top-k values / indices, current and next (kTops of them)
  uint32_t wRawBytes;    // [nIdx] weights as stored
  uint32_t wBytes;       // [AlignUp(nIdx, 8)] float32 weights
  static constexpr uint32_t kChunkBufs = 3;
  static constexpr uint32_t kTops = 4;
  __aicore__ uint64_t Total() const {
    return kChunkBufs * uint64_t{chunkBytes} + indexBytes + sortedBytes + kTops * uint64_t{topBytes} + wRawBytes +
           wBytes;
  }
};

__aicore__ inline LiUbPlan PlanLiUb(const LiTilingData& t, bool weights_f32) {
  LiUbPlan p{};
  p.chunkBytes = t.keyChunk * 4;
  p.indexBytes = t.keyChunk * 4;
  p.sortedBytes = 2 * t.keyChunk * 4;
  p.topBytes = t.kPad * 4;
  p.wRawBytes = static_cast<uint32_t>(AlignUp(uint64_t{t.nIdx} * (weights_f32 ? 4 : 2), kUbAlignBytes));
  p.wBytes = static_cast<uint32_t>(AlignUp(t.nIdx, 8) * 4);
  return p;
}

inline const char* CheckLiInputs(const LiShape& s, uint32_t mode, const CubePlatform& p) {
  if (p.aicNum == 0) return "core count must be positive";
  if (p.aicNum > kSfaMaxAic) return "more than 64 AI cores: the tiling arrays hold 128 AIVs";
  if (s.nIdx == 0 || s.nIdx > 128) return "Nidx must be in [1, 128]";
  if (s.dIdx == 0 || s.dIdx % 16 != 0 || s.dIdx > 1024) {
    return "indexer head dim Didx must be a multiple of 16 in [16, 1024]";
  }
  if (s.k == 0 || s.k > 16384) return "sparse_count must be in [1, 16384]";
  if (mode != 0 && mode != 3) return "sparse_mode must be 0 or 3";
  if (s.batch == 0 && s.layout == SfaLayout::kBSND) return "batch must be positive";
  if (s.layout == SfaLayout::kBSND && (s.t1 != s.batch * s.s1 || s.t2 != s.batch * s.s2)) {
    return "BSND: t1/t2 must equal B*S1/B*S2";
  }
  if (s.t1 > UINT32_MAX || s.t2 > UINT32_MAX) return "shape out of range (T < 2^32)";
  return nullptr;
}

inline LiTilingResult ComputeLiTiling(const LiShape& shape, uint32_t mode, bool weights_f32,
                                      const SfaSeqLengths& lens, const CubePlatform& p) {
  LiTilingResult r{false, nullptr, {}, 0, 0};
  if (const char* err = CheckLiInputs(shape, mode, p)) {
    r.error = err;
    return r;
  }
  // Balanced by visible keys: the SFA split with K * bs = T2 (every visible key is scored).
  const SfaShape s = Normalised(SfaShape{shape.layout, shape.batch, shape.s1, shape.s2, shape.t1, shape.t2, 1, 1, 16,
                                         0, shape.t2 == 0 ? 1 : shape.t2, false, false});
  LiTilingData& t = r.data;
  SetSeqFields(t, s);
  t.sparseMode = mode;
  t.nIdx = static_cast<uint32_t>(shape.nIdx);
  t.dIdx = static_cast<uint32_t>(shape.dIdx);
  t.k = static_cast<uint32_t>(shape.k);
  t.kPad = static_cast<uint32_t>(AlignUp(shape.k, 8));
  const uint64_t want_aic = (s.t1 + 1) / 2;
  t.usedAicNum = static_cast<uint32_t>(want_aic == 0 ? 1 : (want_aic < p.aicNum ? want_aic : p.aicNum));
  t.aivNum = 2 * t.usedAicNum;
  SplitQueryRows(s, SfaAttrs{1.0f, 1, mode, false}, lens, t.aivNum, t.rowStart);
  const uint64_t keys = s.t2 == 0 ? 1 : s.t2;
  t.keyChunk = static_cast<uint32_t>(AlignUp(keys < kLiMaxKeyChunk ? keys : kLiMaxKeyChunk, kLiSortGroup));
  while (PlanLiUb(t, weights_f32).Total() > MixUbBudget(p)) {
    if (t.keyChunk <= kLiSortGroup) {
      r.error = "sparse_count does not fit in the unified buffer";
      return r;
    }
    t.keyChunk /= 2;
  }
  r.ubBytes = PlanLiUb(t, weights_f32).Total();
  t.mmSx = PlanMatmul(t.nIdx, t.keyChunk, t.dIdx, p);
  if (!MatmulFits(t.mmSx, p)) {
    r.error = "no matmul base block fits L0A/L0B/L0C";
    return r;
  }
  t.wsSx = 0;
  t.aivWsBytes = AlignUp(uint64_t{t.nIdx} * t.keyChunk * 4, 512);
  t.workspaceBytes = t.aivWsBytes * t.aivNum;
  r.workspaceBytes = t.workspaceBytes;
  r.ok = true;
  return r;
}

struct LightningIndexerTiling {
  LiTilingResult result;  // result.data.usedAicNum is the blockDim of the mixed launch
  uint64_t tilingKey;
};

inline LightningIndexerTiling ComputeLightningIndexerTiling(const LiShape& shape, uint32_t sparse_mode, DType dtype,
                                                            bool weights_f32, const SfaSeqLengths& lens,
                                                            const CubePlatform& platform) {
  return LightningIndexerTiling{ComputeLiTiling(shape, sparse_mode, weights_f32, lens, platform),
                                LightningIndexerTilingKey(dtype, weights_f32)};
}

}  // namespace mgo::tiling
