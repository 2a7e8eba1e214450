// Pure tiling of DenseLightningIndexerGradKLLoss (mixed kernel: one AIC + two AIV per AI core).
// The main attention has N2 = 1 (query [.., N1, D], key [.., 1, D]: the MLA-absorbed attention
// SparseFlashAttention computes) or N2 = N1 (CANN's plain MHA: key [.., N1, D], head h of a query
// against head h of the keys); every visible key of a token takes part, so nothing is S x S:
//   * row pass: query tokens split over the AIVs in contiguous ranges balanced by the visible
//     keys, taken in groups of qGroup consecutive tokens of one batch (1 for N2 = 1; for N2 = N1 a
//     head's scores are [qGroup, keys] products, never a one-row GEMV); the group's visible keys (a
//     prefix of its batch's keys, read in place) in chunks of keyChunk give S = q kᵀ (+ q_rope
//     k_ropeᵀ) on the cube (per head when N2 = N1), then per token Sx = q_index k_indexᵀ, the
//     teacher p, y from the given index statistics, the loss, d_weights, dS and d_query_index += dS Ki;
//   * key pass: key blocks of keyBlock consecutive key tokens (global token order), split over
//     the AIVs in contiguous ranges; the owner walks the query tokens that see a key of its block
//     in ascending order, tokChunk at a time, recomputes S, Sx, p, y and dI for them against the
//     block and accumulates d_key_index += Coefᵀ Qi in its own float32 block accumulator;
//   * after SyncAll AIV 0 sums the per-token losses in token order.
// Block and chunk boundaries depend on the shape alone, so the bits never depend on the core count.
// Plain C++17 over <cstdint>: compiles for the host tiling, the device and the CPU twin.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "../common/indexer_grad_tiling_common.h"

namespace mgo::tiling {

inline constexpr uint32_t kDlgMaxKeyChunk = 256;  // keys per row-pass chunk
inline constexpr uint32_t kDlgKeyPassRows = 256;  // matmul rows of a key-pass chunk (tokens x heads)
inline constexpr uint32_t kDlgMhaGroup = 16;      // query tokens per row-pass group when N2 = N1: one fractal of M

inline constexpr uint64_t DenseLightningIndexerGradKLLossTilingKey(DType dtype, bool weights_f32) {
  return IndexerTilingKey(dtype, weights_f32);
}

// Shapes as the op sees them: the tokens, then per token the heads and dims.
struct DlgShape {
  SeqShape seq;
  uint64_t n1;    // heads of the main attention (query)
  uint64_t n2;    // key heads: 1 (MLA-absorbed) or n1 (MHA) on Ascend
  uint64_t d;     // head dim of query/key
  uint64_t dr;    // rope dim; 0 = no query_rope/key_rope
  uint64_t nIdx;  // indexer heads
  uint64_t dIdx;  // indexer head dim
  bool cmpResidual = false;  // cmp_residual_k is given (docs/contract.md section 9.1; absent: every residual 0)
};

// What the kernel reads; `attrs` holds every attribute of the op, as the table has them
// (deterministic is honoured always: every sum has one owner and a fixed order).
struct DlgTilingData {
  uint32_t layout;
  uint32_t sparseMode;
  uint32_t hasRope;
  uint32_t cmpResidual;  // 1: the kernel reads cmp_residual_k (attrs.cmp_ratio > 1 and the input given)
  uint32_t batch;
  uint32_t s1;
  uint32_t s2;
  uint32_t t1;
  uint32_t t2;
  uint32_t bsndLens;      // BSND: kBsndLensQuery / kBsndLensKv bits of the per-batch lengths given
  uint32_t n1;
  uint32_t n2;          // 1 or n1
  uint32_t d;
  uint32_t dr;
  uint32_t nIdx;
  uint32_t dIdx;
  float scaleValue;
  uint32_t usedAicNum;  // blockDim of the mixed launch
  uint32_t aivNum;
  uint32_t qGroup;      // query tokens per row-pass group (1 when n2 = 1, kDlgMhaGroup when n2 = n1)
  uint32_t keyChunk;    // keys per row-pass chunk (multiple of 16)
  uint32_t tileRows;    // rows of a [tileRows, keyChunk] float32 S tile in UB
  uint32_t keyBlock;    // key tokens per key-pass block
  uint32_t keyBlocks;   // ceil(t2 / keyBlock)
  uint32_t tokChunk;    // query tokens per key-pass chunk
  uint32_t mMain;       // tokChunk * n1
  uint32_t mKey;        // tokChunk * nIdx
  // Workspace: per-AIV regions first, then the per-token losses (byte offsets from the user workspace).
  uint64_t aivWsBytes;
  uint64_t wsS;     // [qGroup * n1, keyChunk] float32: S chunk of the row pass's group
  uint64_t wsSx;    // [nIdx, keyChunk] float32: Sx chunk of the row pass
  uint64_t wsDs;    // [nIdx, keyChunk] 16-bit: dI w [Sx > 0]
  uint64_t wsDq;    // [qGroup * nIdx, dIdx] float32: d_query_index accumulators of the group's tokens
  uint64_t wsSk;    // [mMain, keyBlock] float32: key-pass S
  uint64_t wsSxk;   // [mKey, keyBlock] float32: key-pass Sx
  uint64_t wsCoef;  // [mKey, keyBlock] 16-bit: dI w [Sx > 0]
  uint64_t wsDkb;   // [keyBlock, dIdx] float32: d_key_index block accumulator
  uint64_t wsLoss;  // global [t1] float32: loss of each token
  uint64_t workspaceBytes;
  MatmulTiling mmNT;  // S = Q Kᵀ, Sx = Qi Kiᵀ (both passes)
  MatmulTiling mmNN;  // d_query_index = dS Ki
  MatmulTiling mmTN;  // d_key_index block += Coefᵀ Qi
  uint32_t rowStart[kMaxAiv + 1];       // AIV i owns query tokens [rowStart[i], rowStart[i+1])
  uint32_t keyBlockStart[kMaxAiv + 1];  // AIV i owns key blocks [keyBlockStart[i], ...[i+1])
  table::DenseLightningIndexerGradKLLossAttrs attrs;
};

// Every UB buffer the kernel allocates (exactly these), so Total() is its footprint.
struct DlgUbPlan {
  uint32_t vecBytes;     // [keyChunk] float32, kVecs of them: p, I/y/dI, Sx row, scratch x 3
  uint32_t vec16Bytes;   // [keyChunk] 16-bit: one dS row
  uint32_t tileBytes;    // float32 [tileRows, keyChunk] S tile; also the key pass's [mMain, keyBlock] S
  uint32_t tileXBytes;   // float32 [mKey, keyBlock] key-pass Sx
  uint32_t tile16Bytes;  // 16-bit [mKey, keyBlock] key-pass coefficients
  uint32_t headBytes;    // [AlignUp(max(n1, nIdx), 8)] float32, kHeads of them: max, sum, w
  uint32_t dwBytes;      // [qGroup, AlignUp(nIdx, 8)] float32: d_weights accumulators of the group's tokens
  uint32_t wBytes;       // [AlignUp(nIdx, 16)] weights as stored (16-bit or float32)
  uint32_t rowFBytes;    // [AlignUp(dIdx, 8)] float32: one output row
  uint32_t rowHBytes;    // [AlignUp(dIdx, 16)] 16-bit: one output row
  uint32_t workBytes;    // ReduceSum/ReduceMax scratch for keyChunk floats
  static constexpr uint32_t kVecs = 6;
  static constexpr uint32_t kHeads = 3;
  static constexpr uint32_t kRedBytes = 32;
  __aicore__ uint64_t Total() const {
    return kVecs * uint64_t{vecBytes} + vec16Bytes + tileBytes + tileXBytes + tile16Bytes +
           kHeads * uint64_t{headBytes} + dwBytes + wBytes + rowFBytes + rowHBytes + workBytes + kRedBytes;
  }
};

__aicore__ inline DlgUbPlan PlanDlgUb(const DlgTilingData& t, bool weights_f32) {
  DlgUbPlan p{};
  p.vecBytes = t.keyChunk * 4;
  p.vec16Bytes = t.keyChunk * kElemBytes16;
  const uint64_t s_tile = uint64_t{t.tileRows} * t.keyChunk * 4;
  const uint64_t k_tile = uint64_t{t.mMain} * t.keyBlock * 4;
  p.tileBytes = static_cast<uint32_t>(s_tile > k_tile ? s_tile : k_tile);
  p.tileXBytes = t.mKey * t.keyBlock * 4;
  p.tile16Bytes = t.mKey * t.keyBlock * kElemBytes16;
  const uint32_t heads = t.n1 > t.nIdx ? t.n1 : t.nIdx;
  p.headBytes = static_cast<uint32_t>(AlignUp(heads, 8) * 4);
  p.dwBytes = static_cast<uint32_t>(t.qGroup * AlignUp(t.nIdx, 8) * 4);
  p.wBytes = static_cast<uint32_t>(AlignUp(uint64_t{t.nIdx} * (weights_f32 ? 4 : 2), kUbAlignBytes));
  p.rowFBytes = static_cast<uint32_t>(AlignUp(t.dIdx, 8) * 4);
  p.rowHBytes = static_cast<uint32_t>(AlignUp(t.dIdx, 16) * kElemBytes16);
  p.workBytes = ReduceScratchFloats(t.keyChunk) * 4;
  return p;
}

// The shape and the platform; nullptr when they can be tiled.
inline const char* CheckDlgInputs(const DlgShape& s, const CubePlatform& p) {
  using Limits = table::DenseLightningIndexerGradKLLossAscend;
  if (const char* err = CheckCubePlatform(p)) return err;
  if (const char* err = OutOfRange<Limits::N1>(s.n1)) return err;
  if (const char* err = OutOfRange<Limits::Nidx>(s.nIdx)) return err;
  // The shape rule takes these two only (infer_shape); kept for callers of the pure tiling.
  if (s.n2 != 1 && s.n2 != s.n1) return "key heads N2 (key dim -2) must be 1 (MLA-absorbed) or N1 (MHA)";
  if (s.d == 0 || s.d % 16 != 0) return "head dim D must be a positive multiple of 16 (32-byte rows)";
  if (s.dr % 16 != 0) return "rope dim Dr must be a multiple of 16 (32-byte rows)";
  if (s.dIdx == 0 || s.dIdx % 16 != 0 || s.dIdx > 1024) {
    return "indexer head dim Didx must be a multiple of 16 in [16, 1024]";
  }
  if (const char* err = CheckSeqShape(s.seq)) return err;
  if (s.seq.t1 * s.n1 > UINT32_MAX || s.seq.t2 > UINT32_MAX || s.d > 4096 || s.dr > 4096) {
    return "shape out of range (T*N < 2^32, D, Dr <= 4096)";
  }
  return nullptr;
}

inline TilingResult<DlgTilingData> ComputeDlgTiling(const DlgShape& shape,
                                                    const table::DenseLightningIndexerGradKLLossAttrs& a,
                                                    bool weights_f32, const SeqLengths& lens, const CubePlatform& p) {
  TilingResult<DlgTilingData> r{false, nullptr, {}, 0, 0};
  if (const char* err = CheckDlgInputs(shape, p)) {
    r.error = err;
    return r;
  }
  const SeqShape s = Normalised(shape.seq);
  DlgTilingData& t = r.data;
  t.attrs = a;
  SetSeqFields(t, s);
  t.sparseMode = static_cast<uint32_t>(a.sparse_mode);
  t.hasRope = shape.dr > 0 ? 1 : 0;
  t.cmpResidual = a.cmp_ratio > 1 && shape.cmpResidual ? 1 : 0;
  t.n1 = static_cast<uint32_t>(shape.n1);
  t.n2 = static_cast<uint32_t>(shape.n2);
  t.qGroup = t.n2 == 1 ? 1 : kDlgMhaGroup;
  t.d = static_cast<uint32_t>(shape.d);
  t.dr = static_cast<uint32_t>(shape.dr);
  t.nIdx = static_cast<uint32_t>(shape.nIdx);
  t.dIdx = static_cast<uint32_t>(shape.dIdx);
  t.scaleValue = static_cast<float>(a.scale_value);

  // Cores: never more AIVs than query tokens (at least one core); rows balanced by visible keys.
  t.usedAicNum = UsedAic(s.t1, p);
  t.aivNum = 2 * t.usedAicNum;
  const uint64_t keys = s.t2 == 0 ? 1 : s.t2;
  SplitQueryRows(s, 1, RowWork{a.sparse_mode, keys, static_cast<uint64_t>(a.cmp_ratio)}, lens, t.aivNum,
                 t.rowStart);

  // Key pass: fixed 16-key blocks, split evenly; tokens per chunk so that both products have at
  // most kDlgKeyPassRows rows.
  t.keyBlock = kIndexerKeyBlock;
  t.keyBlocks = static_cast<uint32_t>((uint64_t{t.t2} + t.keyBlock - 1) / t.keyBlock);
  SplitEvenly(t.keyBlocks, t.aivNum, t.keyBlockStart);
  const uint32_t heads = t.n1 > t.nIdx ? t.n1 : t.nIdx;
  t.tokChunk = heads >= kDlgKeyPassRows ? 1 : kDlgKeyPassRows / heads;
  t.mMain = t.tokChunk * t.n1;
  t.mKey = t.tokChunk * t.nIdx;

  // UB: shrink the row-pass chunk, then the S tile rows, until the plan fits.
  t.keyChunk = static_cast<uint32_t>(AlignUp(keys < kDlgMaxKeyChunk ? keys : kDlgMaxKeyChunk, kCubeAlign));
  t.tileRows = t.n1 < 64 ? t.n1 : 64;
  while (PlanDlgUb(t, weights_f32).Total() > p.ubBytes) {
    if (t.keyChunk > 64) {
      t.keyChunk /= 2;
    } else if (t.tileRows > 8) {
      t.tileRows /= 2;
    } else {
      r.error = "these dims do not fit in the unified buffer";
      return r;
    }
  }
  r.ubBytes = PlanDlgUb(t, weights_f32).Total();

  const uint32_t dk = t.d > t.dr ? t.d : t.dr;
  const auto max = [](uint64_t x, uint64_t y) { return x > y ? x : y; };
  t.mmNT = PlanMatmul(max(max(t.mMain, t.qGroup), max(t.mKey, t.n1)), t.keyChunk, max(dk, t.dIdx), p);
  t.mmNN = PlanMatmul(t.nIdx, t.dIdx, t.keyChunk, p);
  t.mmTN = PlanMatmul(t.keyBlock, t.dIdx, t.mKey, p);
  for (const MatmulTiling* mm : {&t.mmNT, &t.mmNN, &t.mmTN}) {
    if (!MatmulFits(*mm, p)) {
      r.error = "no matmul base block fits L0A/L0B/L0C";
      return r;
    }
  }

  WorkspaceCursor take;
  t.wsS = take(uint64_t{t.qGroup} * t.n1 * t.keyChunk * 4);
  t.wsSx = take(uint64_t{t.nIdx} * t.keyChunk * 4);
  t.wsDs = take(uint64_t{t.nIdx} * t.keyChunk * kElemBytes16);
  t.wsDq = take(uint64_t{t.qGroup} * t.nIdx * t.dIdx * 4);
  t.wsSk = take(uint64_t{t.mMain} * t.keyBlock * 4);
  t.wsSxk = take(uint64_t{t.mKey} * t.keyBlock * 4);
  t.wsCoef = take(uint64_t{t.mKey} * t.keyBlock * kElemBytes16);
  t.wsDkb = take(uint64_t{t.keyBlock} * t.dIdx * 4);
  t.aivWsBytes = take.off;
  t.wsLoss = take.off * t.aivNum;
  t.workspaceBytes = t.wsLoss + AlignUp(s.t1 * 4, 512);
  r.workspaceBytes = t.workspaceBytes;
  r.ok = true;
  return r;
}

struct DenseLightningIndexerGradKLLossTiling {
  TilingResult<DlgTilingData> result;  // result.data.usedAicNum is the blockDim of the mixed launch
  uint64_t tilingKey;
};

inline DenseLightningIndexerGradKLLossTiling ComputeDenseLightningIndexerGradKLLossTiling(
    const DlgShape& shape, const table::DenseLightningIndexerGradKLLossAttrs& attrs, DType dtype, bool weights_f32,
    const SeqLengths& lens, const CubePlatform& platform) {
  return DenseLightningIndexerGradKLLossTiling{ComputeDlgTiling(shape, attrs, weights_f32, lens, platform),
                                               DenseLightningIndexerGradKLLossTilingKey(dtype, weights_f32)};
}

}  // namespace mgo::tiling
