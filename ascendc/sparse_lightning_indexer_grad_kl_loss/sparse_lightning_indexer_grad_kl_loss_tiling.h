// Pure tiling of SparseLightningIndexerGradKLLoss (mixed kernel: one AIC + two AIV per AI core).
// Work units:
//   * row pass: query token t (N2 = 1, block size 1), split over the AIVs in contiguous ranges
//     balanced by the visible-key bound; its visible selected keys are gathered in chunks of
//     keyChunk for S = cat(q, q_rope) cat(k, k_rope)ᵀ, and all of them (<= K) at once for
//     Sx = q_index k_indexᵀ, the softmax over I and d_query_index;
//   * key pass (after SyncAll): key blocks of keyBlock consecutive key tokens (global token
//     space, fixed by the shape alone), split over the AIVs in contiguous ranges; each block's
//     d_key_index rows are summed by one AIV over the (query row, slot) pairs that select them
//     in ascending order, in chunks of rowChunk pairs. The block and chunk boundaries never
//     depend on the core count, so neither do the bits (deterministic in every mode).
// Plain C++17 over <cstdint>: compiles for the host tiling, the device and the CPU twin.
#pragma once

#include <cstdint>

#include "../common/indexer_grad_tiling_common.h"

namespace mgo::tiling {

inline constexpr uint32_t kSliMaxKeyChunk = 512;    // keys per S chunk

// weights_f32: weights (and d_weights) are float32.
inline constexpr uint64_t SparseLightningIndexerGradKLLossTilingKey(DType dtype, bool weights_f32) {
  return IndexerTilingKey(dtype, weights_f32);
}

// Shapes as the op sees them (N2 = 1): the tokens (seq), then per token the heads and dims.
struct SliShape {
  SeqShape seq;
  uint64_t n1;    // heads of the main attention (query)
  uint64_t d;     // head dim of query/key
  uint64_t dr;    // rope dim; 0 = no query_rope/key_rope
  uint64_t nIdx;  // indexer heads
  uint64_t dIdx;  // indexer head dim
  uint64_t k;     // index slots per query token
  bool sinksPresent = false;  // the float32 [N1] sinks input is given
  bool cmpResidual = false;   // cmp_residual_k is given (docs/contract.md section 9.1; absent: every residual 0)
};

// What the kernel reads; `attrs` holds every attribute of the op, as the table has them
// (deterministic is honoured always: the scatter is by key ownership, see above).
struct SliTilingData {
  uint32_t layout;
  uint32_t sparseMode;
  uint32_t hasRope;
  uint32_t hasSinks;    // sinks [N1] given: the teacher is renormalised over the keys
  uint32_t cmpResidual;  // 1: the kernel reads cmp_residual_k (attrs.cmp_ratio > 1 and the input given)
  uint32_t batch;
  uint32_t s1;
  uint32_t s2;
  uint32_t t1;
  uint32_t t2;
  uint32_t n1;
  uint32_t d;
  uint32_t dr;
  uint32_t dk;          // d + dr
  uint32_t nIdx;
  uint32_t dIdx;
  uint32_t k;
  uint32_t kPad;        // AlignUp(k, 16): columns of the per-row buffers
  float scaleValue;
  uint32_t usedAicNum;  // blockDim of the mixed launch
  uint32_t aivNum;
  uint32_t keyChunk;    // keys per S chunk (multiple of 16)
  uint32_t tileRows;    // rows of a [tileRows, keyChunk] float32 S tile in UB
  uint32_t gatherRows;  // rows per UB gather tile
  uint32_t keyBlock;    // key tokens per key-pass block
  uint32_t keyBlocks;   // ceil(t2 / keyBlock)
  uint32_t rowChunk;    // (query row, slot) pairs per key-pass chunk
  uint32_t mKey;        // rowChunk * nIdx: matmul rows of a key-pass chunk
  // Workspace: per-AIV regions first, then global buffers (byte offsets from the user workspace).
  uint64_t aivWsBytes;
  uint64_t wsQf;    // [n1, dk] 16-bit: cat(q, q_rope) rows of the token
  uint64_t wsKf;    // [keyChunk, dk] 16-bit: gathered cat(key, key_rope) rows
  uint64_t wsS;     // [n1, keyChunk] float32: S chunk
  uint64_t wsKi;    // [kPad, dIdx] 16-bit: gathered key_index rows of the token's visible keys
  uint64_t wsSx;    // [nIdx, kPad] float32: Sx
  uint64_t wsDs;    // [nIdx, kPad] 16-bit: dI * w * [Sx > 0]
  uint64_t wsDq;    // [nIdx, dIdx] float32: d_query_index of the token
  uint64_t wsQi;    // [mKey, dIdx] 16-bit: query_index rows of a key-pass chunk
  uint64_t wsKb;    // [keyBlock, dIdx] 16-bit: key_index rows of a key block
  uint64_t wsSxk;   // [mKey, keyBlock] float32: Sx of a key-pass chunk
  uint64_t wsCoef;  // [mKey, keyBlock] 16-bit: dI * w * [Sx > 0] on the selected column
  uint64_t wsDkb;   // [keyBlock, dIdx] float32: d_key_index block accumulator
  uint64_t wsDi;    // global [t1, k] float32: dI per slot (0 for -1 / hidden slots)
  uint64_t wsLoss;  // global [t1] float32: loss of each token
  uint64_t workspaceBytes;
  MatmulTiling mmNT;  // S = Qf Kfᵀ, Sx = Qi Kiᵀ (row pass), Sx = Qi Kbᵀ (key pass)
  MatmulTiling mmNN;  // d_query_index = dS Ki
  MatmulTiling mmTN;  // d_key_index block += Coefᵀ Qi
  uint32_t rowStart[kMaxAiv + 1];       // AIV i owns query tokens [rowStart[i], rowStart[i+1])
  uint32_t keyBlockStart[kMaxAiv + 1];  // AIV i owns key blocks [keyBlockStart[i], ...[i+1])
  table::SparseLightningIndexerGradKLLossAttrs attrs;
};

// Every UB buffer the kernel allocates: the shared core's plus three [kPad] vectors (p, I/y, dI
// by slot) and two head vectors (softmax_max, softmax_sum); the S tile may be the widest tile.
using SliUbPlan = IndexerGradUbPlan<6, 4>;

__aicore__ inline SliUbPlan PlanSliUb(const SliTilingData& t, bool weights_f32) {
  const uint32_t widest = t.dk > t.dIdx ? t.dk : t.dIdx;
  const uint64_t s_tile = uint64_t{t.tileRows} * t.keyChunk * 4;
  const uint64_t k_tile = uint64_t{t.mKey} * t.keyBlock * 4;
  uint32_t heads = t.n1 > t.nIdx ? t.n1 : t.nIdx;
  heads = heads > t.mKey ? heads : t.mKey;
  return PlanIndexerGradUb<SliUbPlan>(t, weights_f32, widest, s_tile > k_tile ? s_tile : k_tile, heads);
}

// The shape and the platform; nullptr when they can be tiled.
inline const char* CheckSliInputs(const SliShape& s, const CubePlatform& p) {
  using Limits = table::SparseLightningIndexerGradKLLossAscend;
  if (const char* err = CheckCubePlatform(p)) return err;
  if (const char* err = OutOfRange<Limits::N1>(s.n1)) return err;
  if (const char* err = OutOfRange<Limits::Nidx>(s.nIdx)) return err;
  if (const char* err = OutOfRange<Limits::K>(s.k)) return err;
  if (s.d == 0 || s.d % 16 != 0) return "head dim D must be a positive multiple of 16 (32-byte rows)";
  if (s.dr % 16 != 0) return "rope dim Dr must be a multiple of 16 (32-byte rows)";
  if (s.dIdx == 0 || s.dIdx % 16 != 0 || s.dIdx > 1024) {
    return "indexer head dim Didx must be a multiple of 16 in [16, 1024]";
  }
  if (const char* err = CheckSeqShape(s.seq)) return err;
  if (s.seq.t1 * s.n1 > UINT32_MAX || s.seq.t2 > UINT32_MAX || s.d + s.dr > 4096) {
    return "shape out of range (T*N < 2^32, D + Dr <= 4096)";
  }
  return nullptr;
}

inline TilingResult<SliTilingData> ComputeSliTiling(const SliShape& shape,
                                                    const table::SparseLightningIndexerGradKLLossAttrs& a,
                                                    bool weights_f32, const SeqLengths& lens, const CubePlatform& p) {
  TilingResult<SliTilingData> r{false, nullptr, {}, 0, 0};
  if (const char* err = CheckSliInputs(shape, p)) {
    r.error = err;
    return r;
  }
  const SeqShape s = Normalised(shape.seq);
  SliTilingData& t = r.data;
  t.attrs = a;
  SetSeqFields(t, s);
  t.sparseMode = static_cast<uint32_t>(a.sparse_mode);
  t.hasRope = shape.dr > 0 ? 1 : 0;
  t.hasSinks = shape.sinksPresent ? 1 : 0;
  t.cmpResidual = a.cmp_ratio > 1 && shape.cmpResidual ? 1 : 0;
  t.n1 = static_cast<uint32_t>(shape.n1);
  t.d = static_cast<uint32_t>(shape.d);
  t.dr = static_cast<uint32_t>(shape.dr);
  t.dk = t.d + t.dr;
  t.nIdx = static_cast<uint32_t>(shape.nIdx);
  t.dIdx = static_cast<uint32_t>(shape.dIdx);
  t.k = static_cast<uint32_t>(shape.k);
  t.kPad = static_cast<uint32_t>(AlignUp(shape.k, kCubeAlign));
  t.scaleValue = static_cast<float>(a.scale_value);

  // Cores: never more AIVs than query tokens (at least one core).
  t.usedAicNum = UsedAic(s.t1, p);
  t.aivNum = 2 * t.usedAicNum;
  SplitQueryRows(s, 1, RowWork{a.sparse_mode, shape.k, static_cast<uint64_t>(a.cmp_ratio)}, lens, t.aivNum,
                 t.rowStart);
  SetIndexerKeyPass(t);

  // UB: shrink the S chunk, then the S tile rows, then the gather tile until the plan fits.
  t.keyChunk = static_cast<uint32_t>(AlignUp(shape.k < kSliMaxKeyChunk ? shape.k : kSliMaxKeyChunk, kCubeAlign));
  t.tileRows = t.n1 < 64 ? t.n1 : 64;
  t.gatherRows = 16;
  while (PlanSliUb(t, weights_f32).Total() > p.ubBytes) {
    if (t.keyChunk > 128) {
      t.keyChunk /= 2;
    } else if (t.tileRows > 8) {
      t.tileRows /= 2;
    } else if (t.gatherRows > 1) {
      t.gatherRows /= 2;
    } else {
      r.error = "K slots or these dims do not fit in the unified buffer";
      return r;
    }
  }
  r.ubBytes = PlanSliUb(t, weights_f32).Total();

  // One Matmul object per transpose mode, tiled for the largest problem it serves (the A·Bᵀ one
  // also computes the teacher's S = Qf Kfᵀ).
  if (const char* err = PlanIndexerGradMatmuls(t, t.n1, t.keyChunk, t.dk, p)) {
    r.error = err;
    return r;
  }

  WorkspaceCursor take;
  t.wsQf = take(uint64_t{t.n1} * t.dk * kElemBytes16);
  t.wsKf = take(uint64_t{t.keyChunk} * t.dk * kElemBytes16);
  t.wsS = take(uint64_t{t.n1} * t.keyChunk * 4);
  TakeIndexerGradWorkspace(t, take);
  const uint64_t off = take.off;
  t.aivWsBytes = off;
  t.wsDi = off * t.aivNum;
  t.wsLoss = t.wsDi + AlignUp(s.t1 * shape.k * 4, 512);
  t.workspaceBytes = t.wsLoss + AlignUp(s.t1 * 4, 512);
  r.workspaceBytes = t.workspaceBytes;
  r.ok = true;
  return r;
}

struct SparseLightningIndexerGradKLLossTiling {
  TilingResult<SliTilingData> result;  // result.data.usedAicNum is the blockDim of the mixed launch
  uint64_t tilingKey;
};

inline SparseLightningIndexerGradKLLossTiling ComputeSparseLightningIndexerGradKLLossTiling(
    const SliShape& shape, const table::SparseLightningIndexerGradKLLossAttrs& attrs, DType dtype, bool weights_f32,
    const SeqLengths& lens, const CubePlatform& platform) {
  return SparseLightningIndexerGradKLLossTiling{ComputeSliTiling(shape, attrs, weights_f32, lens, platform),
                                                SparseLightningIndexerGradKLLossTilingKey(dtype, weights_f32)};
}

}  // namespace mgo::tiling
