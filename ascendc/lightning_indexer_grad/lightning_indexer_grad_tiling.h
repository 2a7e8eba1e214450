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

using LigShape = IndexerShape;  // k = slots of sparse_indices

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
  // Workspace: one region per AIV (byte offsets within it, see TakeIndexerGradWorkspace).
  uint64_t aivWsBytes;
  uint64_t wsKi, wsSx, wsDs, wsDq, wsQi, wsKb, wsSxk, wsCoef, wsDkb;
  uint64_t workspaceBytes;
  SfaMatmulTiling mmNT;  // Sx = Qi Kiᵀ (row pass), Sx = Qi Kbᵀ (key pass)
  SfaMatmulTiling mmNN;  // d_query_index = dS Ki
  SfaMatmulTiling mmTN;  // d_key_index block += Coefᵀ Qi
  uint32_t rowStart[kSfaMaxAiv + 1];       // AIV i owns query tokens [rowStart[i], rowStart[i+1])
  uint32_t keyBlockStart[kSfaMaxAiv + 1];  // AIV i owns key blocks [keyBlockStart[i], ...[i+1])
};

struct LigTilingResult {
  bool ok;
  const char* error;        // static text when !ok
  LigTilingData data;
  uint64_t workspaceBytes;  // user workspace (the op_host adds the system workspace)
  uint64_t ubBytes;         // largest UB footprint of an AIV
};

// Every UB buffer the kernel allocates: exactly the shared core's.
using LigUbPlan = IndexerGradUbPlan<3, 2>;

__aicore__ inline LigUbPlan PlanLigUb(const LigTilingData& t, bool weights_f32) {
  return PlanIndexerGradUb<LigUbPlan>(t, weights_f32, t.dIdx, uint64_t{t.mKey} * t.keyBlock * 4,
                                      t.nIdx > t.mKey ? t.nIdx : t.mKey);
}

inline const char* CheckLigInputs(const LigShape& s, uint32_t sparse_mode, const CubePlatform& p) {
  if (p.aicNum == 0) return "core count must be positive";
  if (p.aicNum > kSfaMaxAic) return "more than 64 AI cores: the tiling arrays hold 128 AIVs";
  if (s.nIdx == 0) return "Nidx must be positive";
  if (s.dIdx == 0 || s.dIdx % 16 != 0) return "indexer head dim Didx must be a positive multiple of 16";
  if (s.k == 0) return "sparse_indices needs at least one slot (K >= 1)";
  if (sparse_mode != 0 && sparse_mode != 3) return "sparse_mode must be 0 or 3";
  if (s.batch == 0 && s.layout == SfaLayout::kBSND) return "batch must be positive";
  if (s.layout == SfaLayout::kBSND && (s.t1 != s.batch * s.s1 || s.t2 != s.batch * s.s2)) {
    return "BSND: t1/t2 must equal B*S1/B*S2";
  }
  if (s.t1 * s.nIdx > UINT32_MAX || s.t2 > UINT32_MAX || s.k > 16384 || s.nIdx > 128 || s.dIdx > 1024) {
    return "shape out of range (T*Nidx < 2^32, K <= 16384, Nidx <= 128, Didx <= 1024)";
  }
  return nullptr;
}

// As the SFA tiling: TND without lengths is BSND with B = 1 (N1 = N2 = 1, no rope).
inline SfaShape LigAsSfaShape(const LigShape& s) {
  return SfaShape{s.layout, s.batch, s.s1, s.s2, s.t1, s.t2, 1, 1, 16, 0, s.k, false, false};
}

inline LigTilingResult ComputeLigTiling(const LigShape& shape, uint32_t sparse_mode, bool weights_f32,
                                        const SfaSeqLengths& lens, const CubePlatform& p) {
  LigTilingResult r{false, nullptr, {}, 0, 0};
  if (const char* err = CheckLigInputs(shape, sparse_mode, p)) {
    r.error = err;
    return r;
  }
  const SfaShape s = Normalised(LigAsSfaShape(shape));
  LigTilingData& t = r.data;
  SetSeqFields(t, s);
  t.sparseMode = sparse_mode;
  t.nIdx = static_cast<uint32_t>(shape.nIdx);
  t.dIdx = static_cast<uint32_t>(shape.dIdx);
  t.k = static_cast<uint32_t>(s.k);
  t.kPad = static_cast<uint32_t>(AlignUp(s.k, kCubeAlign));

  // Cores: enough AIVs for the larger pass (query tokens or key blocks), never an idle AI core.
  const uint64_t key_blocks = (s.t2 + kIndexerKeyBlock - 1) / kIndexerKeyBlock;
  const uint64_t units = s.t1 > key_blocks ? s.t1 : key_blocks;
  const uint64_t want_aic = (units + 1) / 2;
  t.usedAicNum = static_cast<uint32_t>(want_aic == 0 ? 1 : (want_aic < p.aicNum ? want_aic : p.aicNum));
  t.aivNum = 2 * t.usedAicNum;
  const SfaAttrs balance{1.0f, 1, sparse_mode, false};
  SplitQueryRows(s, balance, lens, t.aivNum, t.rowStart);
  SetIndexerKeyPass(t);

  // UB: only the gather tile can shrink; the per-token vectors hold all K slots.
  t.gatherRows = 16;
  while (PlanLigUb(t, weights_f32).Total() > MixUbBudget(p)) {
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
  LigTilingResult result;  // result.data.usedAicNum is the blockDim of the mixed launch
  uint64_t tilingKey;
};

inline LightningIndexerGradTiling ComputeLightningIndexerGradTiling(const LigShape& shape, uint32_t sparse_mode,
                                                                    DType dtype, bool weights_f32,
                                                                    const SfaSeqLengths& lens,
                                                                    const CubePlatform& platform) {
  return LightningIndexerGradTiling{ComputeLigTiling(shape, sparse_mode, weights_f32, lens, platform),
                                    LightningIndexerGradTilingKey(dtype, weights_f32)};
}

}  // namespace mgo::tiling
