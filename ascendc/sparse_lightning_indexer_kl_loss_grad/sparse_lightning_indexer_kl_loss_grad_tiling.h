// Pure tiling of SparseLightningIndexerKLLossGrad (CANN's V4 indexer KL gradient against a target given
// per slot; mixed kernel: one AIC + two AIV per AI core). LightningIndexerGrad's work units with dI
// computed instead of read (common/indexer_grad_tiling_common.h):
//   * row pass: query token t (block size 1), split over the AIVs in contiguous ranges balanced by
//     the visible-key bound; all its visible selected key_index rows (<= K) are gathered at once
//     for Sx, the softmax y over its index scores, dI = y sum(p) - p (stored by slot in a global
//     workspace), the token's loss (global workspace), d_weights and d_query_index;
//   * key pass (after SyncAll): key blocks of keyBlock consecutive key tokens (global token space),
//     split over the AIVs in contiguous ranges; each block's d_key_index rows are summed by one AIV
//     over the (token, slot) pairs selecting them in ascending order, rowChunk pairs per chunk.
// Block and chunk boundaries depend on the shape only, and AIV 0 sums the per-token losses in token
// order: the bits never depend on the core count or on the order cores run in.
// Plain C++17 over <cstdint>: compiles for the host tiling, the device and the CPU twin.
#pragma once

#include <cstdint>

#include "../common/indexer_grad_tiling_common.h"

namespace mgo::tiling {

// weights_f32: weights (and d_weights) are float32.
inline constexpr uint64_t SparseLightningIndexerKLLossGradTilingKey(DType dtype, bool weights_f32) {
  return IndexerTilingKey(dtype, weights_f32);
}

// The shape of sparse_lightning_indexer_kl_loss_grad: the indexer's, and K, the slots of sparse_indices
// (and of attn_softmax_l1_norm / softmax_out).
struct SlkgShape {
  IndexerShape indexer;
  uint64_t k;
};

// What the kernel reads; `attrs` holds every attribute of the op, as the table has them.
struct SlkgTilingData {
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
  uint32_t k;
  uint32_t kPad;         // AlignUp(k, 16): columns of the per-token buffers
  uint32_t usedAicNum;   // blockDim of the mixed launch
  uint32_t aivNum;
  uint32_t gatherRows;   // rows per UB gather tile
  uint32_t keyBlock;     // key tokens per key-pass block
  uint32_t keyBlocks;    // ceil(t2 / keyBlock)
  uint32_t rowChunk;     // (query token, slot) pairs per key-pass chunk
  uint32_t mKey;         // rowChunk * nIdx: matmul rows of a key-pass chunk
  uint32_t cmpResidual;  // 1: the kernel reads cmp_residual_k (attrs.cmp_ratio > 1 and the input given)
  // Workspace: per-AIV regions first (byte offsets within one, see TakeIndexerGradWorkspace), then
  // the global buffers (byte offsets from the user workspace).
  uint64_t aivWsBytes;
  uint64_t wsKi, wsSx, wsDs, wsDq, wsQi, wsKb, wsSxk, wsCoef, wsDkb;
  uint64_t wsDi;    // global [t1, k] float32: dI per slot (written at the visible slots only, read only there)
  uint64_t wsLoss;  // global [t1] float32: loss of each token
  uint64_t workspaceBytes;
  MatmulTiling mmNT;  // Sx = Qi Kiᵀ (row pass), Sx = Qi Kbᵀ (key pass)
  MatmulTiling mmNN;  // d_query_index = dS Ki
  MatmulTiling mmTN;  // d_key_index block += Coefᵀ Qi
  uint32_t rowStart[kMaxAiv + 1];       // AIV i owns query tokens [rowStart[i], rowStart[i+1])
  uint32_t keyBlockStart[kMaxAiv + 1];  // AIV i owns key blocks [keyBlockStart[i], ...[i+1])
  table::SparseLightningIndexerKLLossGradAttrs attrs;
};

// Every UB buffer the kernel allocates: the shared core's plus two [kPad] vectors (p, then the row
// by slot; I, then y).
using SlkgUbPlan = IndexerGradUbPlan<5, 2>;

__aicore__ inline SlkgUbPlan PlanSlkgUb(const SlkgTilingData& t, bool weights_f32) {
  return PlanIndexerGradUb<SlkgUbPlan>(t, weights_f32, t.dIdx, uint64_t{t.mKey} * t.keyBlock * 4,
                                       t.nIdx > t.mKey ? t.nIdx : t.mKey);
}

// The shape and the platform; nullptr when they can be tiled.
inline const char* CheckSlkgInputs(const SlkgShape& s, const CubePlatform& p) {
  using Limits = table::SparseLightningIndexerKLLossGradAscend;
  if (const char* err = CheckCubePlatform(p)) return err;
  if (const char* err = OutOfRange<Limits::Nidx>(s.indexer.nIdx)) return err;
  if (const char* err = OutOfRange<Limits::K>(s.k)) return err;
  if (s.indexer.dIdx == 0 || s.indexer.dIdx % 16 != 0 || s.indexer.dIdx > 1024) {
    return "indexer head dim Didx must be a multiple of 16 in [16, 1024]";
  }
  if (const char* err = CheckSeqShape(s.indexer.seq)) return err;
  if (s.indexer.seq.t1 * s.indexer.nIdx > UINT32_MAX || s.indexer.seq.t1 * s.k > UINT32_MAX ||
      s.indexer.seq.t2 > UINT32_MAX) {
    return "shape out of range (T*Nidx and T*K < 2^32)";
  }
  return nullptr;
}

inline TilingResult<SlkgTilingData> ComputeSlkgTiling(const SlkgShape& shape,
                                                      const table::SparseLightningIndexerKLLossGradAttrs& a,
                                                      bool weights_f32, const SeqLengths& lens,
                                                      const CubePlatform& p) {
  TilingResult<SlkgTilingData> r{false, nullptr, {}, 0, 0};
  if (const char* err = CheckSlkgInputs(shape, p)) {
    r.error = err;
    return r;
  }
  const SeqShape s = Normalised(shape.indexer.seq);
  SlkgTilingData& t = r.data;
  t.attrs = a;
  SetSeqFields(t, s);
  t.sparseMode = static_cast<uint32_t>(a.sparse_mode);
  t.nIdx = static_cast<uint32_t>(shape.indexer.nIdx);
  t.dIdx = static_cast<uint32_t>(shape.indexer.dIdx);
  t.k = static_cast<uint32_t>(shape.k);
  t.kPad = static_cast<uint32_t>(AlignUp(shape.k, kCubeAlign));

  // Cores: enough AIVs for the larger pass (query tokens or key blocks), never an idle AI core.
  const uint64_t key_blocks = (s.t2 + kIndexerKeyBlock - 1) / kIndexerKeyBlock;
  t.usedAicNum = UsedAic(s.t1 > key_blocks ? s.t1 : key_blocks, p);
  t.aivNum = 2 * t.usedAicNum;
  SplitQueryRows(s, 1, RowWork{a.sparse_mode, shape.k, static_cast<uint64_t>(a.cmp_ratio)}, lens, t.aivNum,
                 t.rowStart);
  t.cmpResidual = a.cmp_ratio > 1 && shape.indexer.cmpResidual ? 1 : 0;
  SetIndexerKeyPass(t);

  // UB: only the gather tile can shrink; the per-token vectors hold all K slots.
  t.gatherRows = 16;
  while (PlanSlkgUb(t, weights_f32).Total() > p.ubBytes) {
    if (t.gatherRows == 1) {
      r.error = "K slots or these dims do not fit in the unified buffer";
      return r;
    }
    t.gatherRows /= 2;
  }
  r.ubBytes = PlanSlkgUb(t, weights_f32).Total();

  if (const char* err = PlanIndexerGradMatmuls(t, 0, 0, 0, p)) {
    r.error = err;
    return r;
  }
  WorkspaceCursor take;
  TakeIndexerGradWorkspace(t, take);
  t.aivWsBytes = take.off;
  t.wsDi = take.off * t.aivNum;
  t.wsLoss = t.wsDi + AlignUp(s.t1 * shape.k * 4, 512);
  t.workspaceBytes = t.wsLoss + AlignUp(s.t1 * 4, 512);
  r.workspaceBytes = t.workspaceBytes;
  r.ok = true;
  return r;
}

struct SparseLightningIndexerKLLossGradTiling {
  TilingResult<SlkgTilingData> result;  // result.data.usedAicNum is the blockDim of the mixed launch
  uint64_t tilingKey;
};

inline SparseLightningIndexerKLLossGradTiling ComputeSparseLightningIndexerKLLossGradTiling(
    const SlkgShape& shape, const table::SparseLightningIndexerKLLossGradAttrs& attrs, DType dtype, bool weights_f32,
    const SeqLengths& lens, const CubePlatform& platform) {
  return SparseLightningIndexerKLLossGradTiling{ComputeSlkgTiling(shape, attrs, weights_f32, lens, platform),
                                                SparseLightningIndexerKLLossGradTilingKey(dtype, weights_f32)};
}

}  // namespace mgo::tiling
