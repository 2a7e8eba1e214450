// Pure tiling of LightningIndexerGrad (mixed kernel: one AIC + two AIV per AI core): the gradient
// of the selected index scores I[t, j] = sum_g w[t,g] relu(q_index[t,g] . key_index[j]) given
// d_values (float32, by slot). The backward half of SparseLightningIndexerGradKLLoss with dI read
// from d_values: common/indexer_grad_tiling_common.h. Work units:
//   * row pass: query token t (block size 1), split over the AIVs in contiguous ranges balanced
//     by the visible-key bound; all its visible selected key_index rows (<= K) are gathered at
//     once for Sx, d_weights and d_query_index;
//   * key pass: key blocks of keyBlock consecutive key tokens (global token space), split over
//     the AIVs in contiguous ranges; each block's d_key_index rows are summed by one AIV over the
//     (token, slot) pairs selecting them in ascending order, rowChunk pairs per chunk.
// The passes read only inputs and write disjoint outputs, so no core waits for another (no
// SyncAll); block and chunk boundaries depend on the shape only, so neither do the bits.
// Plain C++17 over <cstdint>: compiles for the host tiling, the device and the CPU twin.
#pragma once

#include <cstdint>

#include "../common/indexer_grad_tiling_common.h"

namespace mgo::tiling {

// weights_f32: weights (and d_weights) are float32.
inline constexpr uint64_t LightningIndexerGradTilingKey(DType dtype, bool weights_f32) {
  return IndexerTilingKey(dtype, weights_f32);
}

// The shape of lightning_indexer_grad: the indexer's, and K, the slots of sparse_indices.
struct LigShape {
  IndexerShape indexer;
  uint64_t k;
};

// What the kernel reads; `attrs` holds every attribute of the op, as the table has them.
struct LigTilingData {
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
  uint32_t kPad;        // AlignUp(k, 16): columns of the per-token buffers
  uint32_t usedAicNum;  // blockDim of the mixed launch
  uint32_t aivNum;
  uint32_t gatherRows;  // rows per UB gather tile
  uint32_t keyBlock;    // key tokens per key-pass block
  uint32_t keyBlocks;   // ceil(t2 / keyBlock)
  uint32_t rowChunk;    // (query token, slot) pairs per key-pass chunk
  uint32_t mKey;        // rowChunk * nIdx: matmul rows of a key-pass chunk
  uint32_t cmpResidual;  // 1: the kernel reads cmp_residual_k (attrs.cmp_ratio > 1 and the input given)
  // Workspace: one region per AIV (byte offsets within it, see TakeIndexerGradWorkspace).
  uint64_t aivWsBytes;
  uint64_t wsKi, wsSx, wsDs, wsDq, wsQi, wsKb, wsSxk, wsCoef, wsDkb;
  uint64_t workspaceBytes;
  MatmulTiling mmNT;  // Sx = Qi Kiᵀ (row pass), Sx = Qi Kbᵀ (key pass)
  MatmulTiling mmNN;  // d_query_index = dS Ki
  MatmulTiling mmTN;  // d_key_index block += Coefᵀ Qi
  uint32_t rowStart[kMaxAiv + 1];       // AIV i owns query tokens [rowStart[i], rowStart[i+1])
  uint32_t keyBlockStart[kMaxAiv + 1];  // AIV i owns key blocks [keyBlockStart[i], ...[i+1])
  table::LightningIndexerGradAttrs attrs;
};

// Every UB buffer the kernel allocates: exactly the shared core's.
using LigUbPlan = IndexerGradUbPlan<3, 2>;

__aicore__ inline LigUbPlan PlanLigUb(const LigTilingData& t, bool weights_f32) {
  return PlanIndexerGradUb<LigUbPlan>(t, weights_f32, t.dIdx, uint64_t{t.mKey} * t.keyBlock * 4,
                                      t.nIdx > t.mKey ? t.nIdx : t.mKey);
}

// The shape and the platform; nullptr when they can be tiled.
inline const char* CheckLigInputs(const LigShape& s, const CubePlatform& p) {
  using Limits = table::LightningIndexerGradAscend;
  if (const char* err = CheckCubePlatform(p)) return err;
  if (const char* err = OutOfRange<Limits::Nidx>(s.indexer.nIdx)) return err;
  if (const char* err = OutOfRange<Limits::K>(s.k)) return err;
  if (s.indexer.dIdx == 0 || s.indexer.dIdx % 16 != 0 || s.indexer.dIdx > 1024) {
    return "indexer head dim Didx must be a multiple of 16 in [16, 1024]";
  }
  if (const char* err = CheckSeqShape(s.indexer.seq)) return err;
  if (s.indexer.seq.t1 * s.indexer.nIdx > UINT32_MAX || s.indexer.seq.t2 > UINT32_MAX) {
    return "shape out of range (T*Nidx < 2^32)";
  }
  return nullptr;
}

inline TilingResult<LigTilingData> ComputeLigTiling(const LigShape& shape, const table::LightningIndexerGradAttrs& a,
                                                    bool weights_f32, const SeqLengths& lens, const CubePlatform& p) {
  TilingResult<LigTilingData> r{false, nullptr, {}, 0, 0};
  if (const char* err = CheckLigInputs(shape, p)) {
    r.error = err;
    return r;
  }
  const SeqShape s = Normalised(shape.indexer.seq);
  LigTilingData& t = r.data;
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
  while (PlanLigUb(t, weights_f32).Total() > p.ubBytes) {
    if (t.gatherRows == 1) {
      r.error = "K slots or these dims do not fit in the unified buffer";
      return r;
    }
    t.gatherRows /= 2;
  }
  r.ubBytes = PlanLigUb(t, weights_f32).Total();

  if (const char* err = PlanIndexerGradMatmuls(t, 0, 0, 0, p)) {
    r.error = err;
    return r;
  }
  WorkspaceCursor take;
  TakeIndexerGradWorkspace(t, take);
  t.aivWsBytes = take.off;
  t.workspaceBytes = take.off * t.aivNum;
  r.workspaceBytes = t.workspaceBytes;
  r.ok = true;
  return r;
}

struct LightningIndexerGradTiling {
  TilingResult<LigTilingData> result;  // result.data.usedAicNum is the blockDim of the mixed launch
  uint64_t tilingKey;
};

inline LightningIndexerGradTiling ComputeLightningIndexerGradTiling(const LigShape& shape,
                                                                    const table::LightningIndexerGradAttrs& attrs,
                                                                    DType dtype, bool weights_f32,
                                                                    const SeqLengths& lens,
                                                                    const CubePlatform& platform) {
  return LightningIndexerGradTiling{ComputeLigTiling(shape, attrs, weights_f32, lens, platform),
                                    LightningIndexerGradTilingKey(dtype, weights_f32)};
}

}  // namespace mgo::tiling
