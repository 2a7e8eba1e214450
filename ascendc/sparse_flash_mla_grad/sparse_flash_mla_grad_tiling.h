// Pure tiling of SparseFlashMlaGrad (docs/contract.md section 8): (shapes, the op's table attributes, dtype,
// platform) -> tiling data, tiling key, workspace size. Mixed kernel (one AIC + two AIV per AI core).
//
// Work units:
//   * a "query row" is (token t, key group g): G = N1 / N2 heads; the row pass splits them over the AIVs in
//     contiguous ranges of equal size (the lengths' values live on the device, so rows are balanced by count);
//   * a "key row" is (ori_kv or cmp_kv token, g); the key pass splits each source's key rows evenly, and the
//     AIV owning a key block's first row computes the whole block (keyBlock keys).
// The row pass reads each row's keys in chunks of at most keyChunk (the band as contiguous ranges of ori_kv,
// then the compressed entries); the key pass multiplies up to rowChunk query rows against one key block.
// The row geometry (shapes, batches, bands, compressed limits) is smla_tiling_common.h's, the forward's.
// Plain C++17 over <cstdint>: compiles for the host tiling, the device and the CPU twin.
#pragma once

#include <cstdint>

#include "../../infer_shape/op_attrs.h"
#include "../common/smla_tiling_common.h"
#include "../common/tiling_common.h"

namespace mgo::tiling {

inline constexpr uint64_t SparseFlashMlaGradTilingKey(DType dtype) { return static_cast<uint64_t>(dtype); }

inline constexpr uint32_t kSmlaMaxKeyChunk = 512;  // keys per row-pass chunk, as CANN's kernels use
inline constexpr uint32_t kSmlaKeyBlock = 64;      // keys per key-pass block
inline constexpr uint32_t kSmlaKeyPassRows = 64;   // matmul rows (query rows x G) per key-pass chunk

// Every UB buffer one AIV allocates (the kernel allocates exactly these), so Total() is its footprint.
struct SmlaGradUbPlan {
  uint32_t gatherBytes;  // [gatherRows, d] 16-bit: rows on their way GM -> UB -> workspace
  uint32_t scoreBytes;   // [tileRows, AlignUp(cw, 8)] float32: S -> P
  uint32_t auxBytes;     // same: dP -> dS
  uint32_t ioBytes;      // [tileRows, AlignUp(cw, 16)] 16-bit: dS or P on their way to the workspace
  uint32_t rowFBytes;    // [AlignUp(d, 8)] float32: one head row
  uint32_t rowHBytes;    // [AlignUp(d, 16)] 16-bit: one head row
  uint32_t statBytes;    // [AlignUp(mRows, 8)] float32: one per-row statistic
  uint32_t workBytes;    // ReduceSum scratch
  uint32_t colBytes;     // [AlignUp(cw, 8)] float32 column sums (L1 norms) and int32 column slots
  uint32_t multBytes;    // [rowChunk, AlignUp(keyBlock, 8)] float32: the key pass's slot multiplicities
  uint32_t l1OriBytes;   // [AlignUp(kOri, 8)] float32: one row's ori_softmax_l1_norm
  uint32_t l1CmpBytes;   // [AlignUp(kCmp, 8)] float32: one row's cmp_softmax_l1_norm
  uint32_t sinkBytes;    // [AlignUp(n1, 8)] float32: the d_sinks accumulator
  static constexpr uint32_t kStats = 4;      // lse, delta, sink, sink term
  static constexpr uint32_t kRedBytes = 32;  // one reduce result
  __aicore__ uint64_t Total() const {
    return uint64_t{gatherBytes} + scoreBytes + auxBytes + 2ull * ioBytes + 2ull * (rowFBytes + rowHBytes) +
           kStats * uint64_t{statBytes} + kRedBytes + workBytes + 2ull * colBytes + multBytes + l1OriBytes +
           l1CmpBytes + sinkBytes;
  }
};

struct SparseFlashMlaGradTilingData {
  SmlaGeo geo;           // the row geometry, the forward's (smla_tiling_common.h)
  uint32_t usedAicNum;   // blockDim of the launch
  uint32_t aivNum;       // 2 * usedAicNum
  uint32_t keyChunk;     // keys per row-pass chunk
  uint32_t keyBlock;     // keys per key-pass block
  uint32_t rowChunk;     // query rows per key-pass chunk
  uint32_t mRows;        // max(G, rowChunk * G): matmul rows of one half (Q or dO)
  uint32_t chunkCols;    // max(keyChunk, AlignUp(keyBlock, 16)): columns of the score workspaces
  uint32_t ubTileRows;   // softmax tile rows
  uint32_t gatherRows;   // rows per gather copy
  uint32_t sinkTileRows; // token rows per d_sinks tile
  uint64_t aivWsBytes;   // per-AIV workspace region
  uint64_t wsQd;         // [2 mRows, d] 16-bit: the Q rows, then the dO rows
  uint64_t wsK;          // [chunkCols, d] 16-bit: the gathered keys (= values)
  uint64_t wsSd;         // [2 mRows, chunkCols] float32: S, then dP
  uint64_t wsPd;         // [2 mRows, chunkCols] 16-bit: dS (key pass: scale * dS), then P
  uint64_t wsAcc;        // [G, d] float32: dQ accumulator
  uint64_t wsDkv;        // [AlignUp(keyBlock, 16), d] float32: a key block's gradient
  uint64_t wsDelta;      // global [t1 * n1] float32: rowsum(dO * O)
  uint64_t wsSink;       // global [t1 * n1] float32: -P_sink * delta (with sinks)
  uint64_t workspaceBytes;
  MatmulTiling mmScore;  // [S; dP] = [Q; dO] Kᵀ   (A·Bᵀ object)
  MatmulTiling mmDq;     // dQ = dS K             (A·B object)
  MatmulTiling mmDkv;    // dKV = [scale dS; P]ᵀ [Q; dO]  (Aᵀ·B object)
  uint32_t rowStart[kMaxAiv + 1];
  uint32_t oriKeyStart[kMaxAiv + 1];
  uint32_t cmpKeyStart[kMaxAiv + 1];
  table::SparseFlashMlaGradAttrs attrs;
};

__aicore__ inline SmlaGradUbPlan PlanSmlaGradUb(uint32_t gather_rows, uint32_t tile_rows, uint32_t cw, uint32_t d,
                                                uint32_t m, uint32_t row_chunk, uint32_t key_block, uint32_t k_ori,
                                                uint32_t k_cmp, uint32_t sink_heads) {
  SmlaGradUbPlan p{};
  p.gatherBytes = static_cast<uint32_t>(AlignUp(uint64_t{gather_rows} * d * kElemBytes16, kUbAlignBytes));
  p.scoreBytes = static_cast<uint32_t>(uint64_t{tile_rows} * AlignUp(cw, 8) * 4);
  p.auxBytes = p.scoreBytes;
  p.ioBytes = static_cast<uint32_t>(uint64_t{tile_rows} * AlignUp(cw, 16) * kElemBytes16);
  p.rowFBytes = static_cast<uint32_t>(AlignUp(d, 8) * 4);
  p.rowHBytes = static_cast<uint32_t>(AlignUp(d, 16) * kElemBytes16);
  p.statBytes = static_cast<uint32_t>(AlignUp(m, 8) * 4);
  p.workBytes = ReduceScratchFloats(cw > d ? cw : d) * 4;
  p.colBytes = static_cast<uint32_t>(AlignUp(cw, 8) * 4);
  p.multBytes = static_cast<uint32_t>(uint64_t{row_chunk} * AlignUp(key_block, 8) * 4);
  p.l1OriBytes = static_cast<uint32_t>(AlignUp(k_ori, 8) * 4);
  p.l1CmpBytes = static_cast<uint32_t>(AlignUp(k_cmp, 8) * 4);
  p.sinkBytes = static_cast<uint32_t>(AlignUp(sink_heads, 8) * 4);
  return p;
}

struct SparseFlashMlaGradTiling {
  TilingResult<SparseFlashMlaGradTilingData> result;  // result.data.usedAicNum: the launch's blockDim
  uint64_t tilingKey;
};

inline SparseFlashMlaGradTiling ComputeSparseFlashMlaGradTiling(const SmlaShape& s,
                                                                const table::SparseFlashMlaGradAttrs& a, DType dtype,
                                                                const CubePlatform& p) {
  SparseFlashMlaGradTiling out{{false, nullptr, {}, 0, 0}, SparseFlashMlaGradTilingKey(dtype)};
  auto& r = out.result;
  if (const char* err = CheckSmlaAscend<table::SparseFlashMlaGradAscend>(s, p)) {
    r.error = err;
    return out;
  }
  SparseFlashMlaGradTilingData& t = r.data;
  t.attrs = a;
  // The shared geometry (TND without cu_seqlens_q: one sequence, BSND with B = 1).
  t.geo = MakeSmlaGeo(s, a);
  const SmlaGeo& g = t.geo;

  // Cores: never more AIVs than query rows (at least one core); every AIV takes part in the key pass.
  t.usedAicNum = UsedAic(s.t1 * s.n2, p);
  t.aivNum = 2 * t.usedAicNum;
  SplitEvenly(s.t1 * s.n2, t.aivNum, t.rowStart);
  SplitEvenly(s.t2 * s.n2, t.aivNum, t.oriKeyStart);
  SplitEvenly(s.hasCmp ? s.t3 * s.n2 : 0, t.aivNum, t.cmpKeyStart);

  t.keyChunk = kSmlaMaxKeyChunk;
  t.keyBlock = kSmlaKeyBlock;
  t.rowChunk = g.g >= kSmlaKeyPassRows ? 1 : kSmlaKeyPassRows / g.g;
  t.mRows = g.g > t.rowChunk * g.g ? g.g : t.rowChunk * g.g;
  const uint32_t block_cols = static_cast<uint32_t>(AlignUp(t.keyBlock, kCubeAlign));
  t.gatherRows = 16;
  uint32_t tile_rows = t.mRows < 64 ? t.mRows : 64;
  const auto cols = [&] { return t.keyChunk > block_cols ? t.keyChunk : block_cols; };
  const uint32_t sink_heads = s.hasSinks ? g.n1 : 0;
  const auto plan = [&] {
    return PlanSmlaGradUb(t.gatherRows, tile_rows, cols(), g.d, t.mRows, t.rowChunk, t.keyBlock, g.kOri, g.kCmp,
                          sink_heads);
  };
  while (plan().Total() > p.ubBytes) {
    if (tile_rows > 8) {
      tile_rows /= 2;
    } else if (t.keyChunk > 128) {
      t.keyChunk /= 2;
    } else if (t.gatherRows > 1) {
      t.gatherRows /= 2;
    } else {
      r.error = "a score tile of these dims does not fit in the unified buffer";
      return out;
    }
  }
  t.ubTileRows = tile_rows;
  t.chunkCols = cols();
  r.ubBytes = plan().Total();
  if (sink_heads > 0) {
    const uint64_t rows = plan().scoreBytes / (AlignUp(sink_heads, 8) * 4);
    if (rows == 0) {
      r.error = "N1 too large for the d_sinks sum's UB tile";
      return out;
    }
    t.sinkTileRows = static_cast<uint32_t>(rows < 4095 ? rows : 4095);  // DataCopyPad's blockCount limit
  }

  const uint32_t c = t.chunkCols;
  t.mmScore = PlanMatmul(2 * t.mRows, c, g.d, p);
  t.mmDq = PlanMatmul(g.g, g.d, c, p);
  t.mmDkv = PlanMatmul(block_cols, g.d, 2 * t.mRows, p);
  const MatmulTiling* all[] = {&t.mmScore, &t.mmDq, &t.mmDkv};
  for (const MatmulTiling* mm : all) {
    if (!MatmulFits(*mm, p)) {
      r.error = "no matmul base block fits L0A/L0B/L0C";
      return out;
    }
  }

  WorkspaceCursor take;
  const uint64_t m2 = 2ull * t.mRows;
  t.wsQd = take(m2 * g.d * kElemBytes16);
  t.wsK = take(uint64_t{c} * g.d * kElemBytes16);
  t.wsSd = take(m2 * c * 4);
  t.wsPd = take(m2 * c * kElemBytes16);
  t.wsAcc = take(uint64_t{g.g} * g.d * 4);
  t.wsDkv = take(uint64_t{block_cols} * g.d * 4);
  t.aivWsBytes = take.off;
  const uint64_t stat_bytes = AlignUp(s.t1 * s.n1 * 4, 512);
  t.wsDelta = take.off * t.aivNum;
  t.wsSink = t.wsDelta + stat_bytes;
  t.workspaceBytes = t.wsSink + (sink_heads > 0 ? stat_bytes : 0);
  r.workspaceBytes = t.workspaceBytes;
  r.ok = true;
  return out;
}

}  // namespace mgo::tiling
