// Pure tiling of DenseLightningIndexerSoftmaxLse (mixed kernel: the cube computes Sx = q_index
// k_indexᵀ, the vector cores the scores I = sum_g w_g relu(Sx[g]) and their running max and
// sum of exponentials). Work unit: a query token; tokens are split over the AIVs in contiguous
// ranges balanced by their visible-key counts (+16 per token), as LightningIndexer's. A token's
// visible keys (a prefix of its batch's keys) are scored in chunks of keyChunk keys (a multiple
// of 16, at most 512), so the UB holds O(keyChunk) floats whatever the sequence length.
// Plain C++17 over <cstdint>: compiles for the host tiling, the device and the CPU twin.
#pragma once

#include <cstdint>

#include "../common/indexer_tiling_common.h"

namespace mgo::tiling {

inline constexpr uint32_t kDliMaxKeyChunk = 512;

inline constexpr uint64_t DenseLightningIndexerSoftmaxLseTilingKey(DType dtype, bool weights_f32) {
  return IndexerTilingKey(dtype, weights_f32);
}

// What the kernel reads; `attrs` holds every attribute of the op, as the table has them.
struct DliTilingData {
  uint32_t layout;
  uint32_t sparseMode;
  uint32_t batch;
  uint32_t s1;
  uint32_t s2;
  uint32_t t1;
  uint32_t t2;
  uint32_t bsndLens;      // BSND: kBsndLensQuery / kBsndLensKv bits of the per-batch lengths given
  uint32_t nIdx;
  uint32_t dIdx;
  uint32_t usedAicNum;  // blockDim of the mixed launch
  uint32_t aivNum;
  uint32_t keyChunk;    // keys per chunk, a multiple of 16
  uint32_t cmpResidual;  // 1: the kernel reads cmp_residual_k (attrs.cmp_ratio > 1 and the input given)
  uint64_t aivWsBytes;
  uint64_t wsSx;        // per AIV [nIdx, keyChunk] float32
  uint64_t workspaceBytes;
  MatmulTiling mmSx;  // Sx = q_index Kiᵀ
  uint32_t rowStart[kMaxAiv + 1];
  table::DenseLightningIndexerSoftmaxLseAttrs attrs;
};

// Every UB buffer the kernel allocates (exactly these).
struct DliUbPlan {
  uint32_t chunkBytes;  // [keyChunk] float32: scores, Sx row, scratch (kChunkBufs of them)
  uint32_t wRawBytes;   // [nIdx] weights as stored
  uint32_t wBytes;      // [AlignUp(nIdx, 8)] float32 weights
  uint32_t workBytes;   // ReduceMax/ReduceSum scratch for keyChunk floats
  static constexpr uint32_t kChunkBufs = 3;
  static constexpr uint32_t kSmallBytes = 32;  // 8 floats: reduce result, running statistics (kSmall of them)
  static constexpr uint32_t kSmall = 2;
  __aicore__ uint64_t Total() const {
    return kChunkBufs * uint64_t{chunkBytes} + wRawBytes + wBytes + workBytes + kSmall * uint64_t{kSmallBytes};
  }
};

__aicore__ inline DliUbPlan PlanDliUb(const DliTilingData& t, bool weights_f32) {
  DliUbPlan p{};
  p.chunkBytes = t.keyChunk * 4;
  p.wRawBytes = static_cast<uint32_t>(AlignUp(uint64_t{t.nIdx} * (weights_f32 ? 4 : 2), kUbAlignBytes));
  p.wBytes = static_cast<uint32_t>(AlignUp(t.nIdx, 8) * 4);
  p.workBytes = ReduceScratchFloats(t.keyChunk) * 4;
  return p;
}

// The shape and the platform; nullptr when they can be tiled.
inline const char* CheckDliInputs(const IndexerShape& s, const CubePlatform& p) {
  using Limits = table::DenseLightningIndexerSoftmaxLseAscend;
  if (const char* err = CheckCubePlatform(p)) return err;
  if (const char* err = OutOfRange<Limits::Nidx>(s.nIdx)) return err;
  if (s.dIdx == 0 || s.dIdx % 16 != 0 || s.dIdx > 1024) {
    return "indexer head dim Didx must be a multiple of 16 in [16, 1024]";
  }
  if (const char* err = CheckSeqShape(s.seq)) return err;
  if (s.seq.t1 > UINT32_MAX || s.seq.t2 > UINT32_MAX) return "shape out of range (T < 2^32)";
  return nullptr;
}

inline TilingResult<DliTilingData> ComputeDliTiling(const IndexerShape& shape,
                                                    const table::DenseLightningIndexerSoftmaxLseAttrs& a,
                                                    bool weights_f32, const SeqLengths& lens, const CubePlatform& p) {
  TilingResult<DliTilingData> r{false, nullptr, {}, 0, 0};
  if (const char* err = CheckDliInputs(shape, p)) {
    r.error = err;
    return r;
  }
  const SeqShape s = Normalised(shape.seq);
  DliTilingData& t = r.data;
  t.attrs = a;
  SetSeqFields(t, s);
  t.sparseMode = static_cast<uint32_t>(a.sparse_mode);
  t.nIdx = static_cast<uint32_t>(shape.nIdx);
  t.dIdx = static_cast<uint32_t>(shape.dIdx);
  t.usedAicNum = UsedAic(s.t1, p);
  t.aivNum = 2 * t.usedAicNum;
  const uint64_t keys = s.t2 == 0 ? 1 : s.t2;
  // Compressed keys (cmp_ratio, cmp_residual_k; docs/contract.md section 9.1) change only how many keys a
  // token sees (CmpVisibleKeys, in the kernel's geometry).
  SplitQueryRows(s, 1, RowWork{a.sparse_mode, keys, static_cast<uint64_t>(a.cmp_ratio)}, lens, t.aivNum,
                 t.rowStart);
  t.cmpResidual = a.cmp_ratio > 1 && shape.cmpResidual ? 1 : 0;
  t.keyChunk = static_cast<uint32_t>(AlignUp(keys < kDliMaxKeyChunk ? keys : kDliMaxKeyChunk, kCubeAlign));
  while (PlanDliUb(t, weights_f32).Total() > p.ubBytes) {
    if (t.keyChunk <= kCubeAlign) {
      r.error = "these dims do not fit in the unified buffer";
      return r;
    }
    t.keyChunk = static_cast<uint32_t>(AlignUp(t.keyChunk / 2, kCubeAlign));
  }
  r.ubBytes = PlanDliUb(t, weights_f32).Total();
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

struct DenseLightningIndexerSoftmaxLseTiling {
  TilingResult<DliTilingData> result;  // result.data.usedAicNum is the blockDim of the mixed launch
  uint64_t tilingKey;
};

inline DenseLightningIndexerSoftmaxLseTiling ComputeDenseLightningIndexerSoftmaxLseTiling(
    const IndexerShape& shape, const table::DenseLightningIndexerSoftmaxLseAttrs& attrs, DType dtype,
    bool weights_f32, const SeqLengths& lens, const CubePlatform& platform) {
  return DenseLightningIndexerSoftmaxLseTiling{ComputeDliTiling(shape, attrs, weights_f32, lens, platform),
                                               DenseLightningIndexerSoftmaxLseTilingKey(dtype, weights_f32)};
}

}  // namespace mgo::tiling
