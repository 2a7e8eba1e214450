// Pure tiling of SparseFlashMla (forward): (shapes, the op's table attributes, dtype, the length values when
// the caller knows them, platform sizes and AIC count) -> tiling data, tiling key, workspace size.
// The row geometry is smla_tiling_common.h's (shared with the grad); the UB plan is the SFA forward's
// (sfa_tiling_common.h: PlanSfaUb with no rope, D = dk), since the kernel's vector work is the same.
#pragma once

#include <cstdint>

#include "../common/sfa_tiling_common.h"
#include "../common/smla_tiling_common.h"

namespace mgo::tiling {

// Tiling key = dtype.
inline constexpr uint64_t SparseFlashMlaTilingKey(DType dtype) { return static_cast<uint64_t>(dtype); }

// What the kernel reads. Per AIV a workspace region: wsQ [G, D] 16-bit (the row's query heads), wsKv
// [keyChunk, D] 16-bit (the gathered keys = values), wsS [G, keyChunk] float32 scores, wsP [G, keyChunk] 16-bit
// probabilities, wsAcc [G, D] float32 output accumulator.
struct SparseFlashMlaTilingData {
  SmlaGeo geo;
  table::SparseFlashMlaAttrs attrs;  // as the op was called (geo holds what the kernel reads of them)
  uint32_t usedAicNum;  // blockDim of the launch
  uint32_t aivNum;      // 2 * usedAicNum
  uint32_t keyChunk;    // keys per chunk (a multiple of 16, <= 512)
  uint32_t gatherRows;  // key rows per UB gather buffer
  uint32_t ubTileRows;  // heads per UB score tile
  uint64_t aivWsBytes;
  uint64_t wsQ, wsKv, wsS, wsP, wsAcc;
  uint64_t workspaceBytes;
  MatmulTiling mmScore;  // S = Q Kᵀ  [G, keyChunk], K = D
  MatmulTiling mmPv;     // O += P V [G, D], K = keyChunk
  uint32_t rowStart[kMaxAiv + 1];  // AIV i owns query rows [rowStart[i], rowStart[i + 1])
};

struct SparseFlashMlaTiling {
  TilingResult<SparseFlashMlaTilingData> result;
  uint64_t tilingKey;
};

// The forward's UB plan: SFA's forward plan with D for dk and G matmul rows.
__aicore__ inline SfaUbPlan PlanSparseFlashMlaUb(const SparseFlashMlaTilingData& t) {
  return PlanSfaUb(false, t.gatherRows, t.ubTileRows, t.keyChunk, t.geo.d, t.geo.g, 0);
}

// `lens`: the length values when known (balancing by keys), or nullptr (the op_host: they are device tensors).
inline SparseFlashMlaTiling ComputeSparseFlashMlaTiling(const SmlaShape& s, const table::SparseFlashMlaAttrs& a,
                                                       DType dtype, const SmlaLensHost* lens,
                                                       const CubePlatform& p) {
  SparseFlashMlaTiling out{{false, nullptr, {}, 0, 0}, SparseFlashMlaTilingKey(dtype)};
  auto& r = out.result;
  if (const char* err = CheckSmlaAscend<table::SparseFlashMlaAscend>(s, p)) {
    r.error = err;
    return out;
  }
  SparseFlashMlaTilingData& t = r.data;
  t.attrs = a;
  t.geo = MakeSmlaGeo(s, a);
  const SmlaGeo& g = t.geo;
  t.usedAicNum = UsedAic(uint64_t{g.t1} * g.n2, p);
  t.aivNum = 2 * t.usedAicNum;
  SplitSmlaRows(g, lens, t.aivNum, t.rowStart);

  // Chunk: 512 keys (CANN's), halved while the UB plan does not fit, then fewer heads per score tile, then
  // fewer gather rows.
  t.keyChunk = kMaxKeyChunk;
  t.gatherRows = 16;
  t.ubTileRows = g.g < 64 ? g.g : 64;
  while (PlanSparseFlashMlaUb(t).Total() > p.ubBytes) {
    if (t.keyChunk > 128) {
      t.keyChunk /= 2;
    } else if (t.ubTileRows > 8) {
      t.ubTileRows /= 2;
    } else if (t.gatherRows > 1) {
      t.gatherRows /= 2;
    } else {
      r.error = "a score tile of these dims does not fit in the unified buffer";
      return out;
    }
  }
  r.ubBytes = PlanSparseFlashMlaUb(t).Total();
  t.mmScore = PlanMatmul(g.g, t.keyChunk, g.d, p);
  t.mmPv = PlanMatmul(g.g, g.d, t.keyChunk, p);
  if (!MatmulFits(t.mmScore, p) || !MatmulFits(t.mmPv, p)) {
    r.error = "no matmul base block fits L0A/L0B/L0C";
    return out;
  }
  WorkspaceCursor take;
  const uint64_t cw = t.keyChunk;
  t.wsQ = take(uint64_t{g.g} * g.d * kElemBytes16);
  t.wsKv = take(cw * g.d * kElemBytes16);
  t.wsS = take(uint64_t{g.g} * cw * 4);
  t.wsP = take(uint64_t{g.g} * cw * kElemBytes16);
  t.wsAcc = take(uint64_t{g.g} * g.d * 4);
  t.aivWsBytes = take.off;
  t.workspaceBytes = t.aivWsBytes * t.aivNum;
  r.workspaceBytes = t.workspaceBytes;
  r.ok = true;
  return out;
}

}  // namespace mgo::tiling
