// Pure tiling shared by sparse_flash_attention (forward) and sparse_flash_attention_grad.
// Mixed kernels (one AIC + two AIV per AI core). Work units:
//   * a "query row" is (token t, key group g): G = N1 / N2 heads, K index slots;
//     query rows are split over the AIVs in contiguous ranges balanced by visible-key work;
//   * a "key row" is (key token, g); the grad's key pass (dK/dV by key ownership) splits key
//     rows over the AIVs in contiguous ranges of equal size.
// Selected keys are processed in chunks of `keyChunk` keys (gathered by the AIV into a per-AIV
// GM workspace, multiplied by the AIC through the high-level Matmul object).
// The sequence geometry is seq_tiling_common.h's, the platform and Matmul pieces tiling_common.h's.
// Plain C++17 over <cstdint>: compiles for the host tiling, the device and the CPU twin.
#pragma once

#include <cstdint>

#include "seq_tiling_common.h"

namespace mgo::tiling {

inline constexpr uint32_t kMaxKeyChunk = 512;  // keys per chunk, as CANN uses

// Shapes as the op sees them: the tokens (seq) and per token the heads and dims.
struct SfaShape {
  SeqShape seq;
  uint64_t n1;
  uint64_t n2;
  uint64_t d;   // head dim of query/key/value
  uint64_t dr;  // rope dim; 0 = no query_rope/key_rope inputs
  uint64_t k;   // index slots per query row
  bool seqLensInt64 = false;  // actual_seq_lengths_* are int64 (else int32)
  bool valueAbsent = false;   // no value input: key is value (forward v = key; grad d_key = dK + dV
                              // summed in float32 and rounded once, no d_value written)
  bool sinksPresent = false;  // the float32 [N1] sinks input is given (grad: d_sinks is written)
};

// What both kernels read; each op's tiling data (<op>_tiling.h) adds its table attributes.
// Contiguous ranges of query rows (rowStart) or key rows (keyRowStart) per AIV:
// AIV i owns [start[i], start[i+1]).
struct SfaTilingData {
  uint32_t layout;        // table::Layout
  uint32_t sparseMode;    // table::SparseMode
  uint32_t blockSize;
  uint32_t hasRope;
  uint32_t seqLensInt64;
  uint32_t hasValue;
  uint32_t hasSinks;      // sinks [N1] given: every softmax row has the extra sink logit
  uint32_t batch;
  uint32_t s1;
  uint32_t s2;
  uint32_t t1;
  uint32_t t2;
  uint32_t bsndLens;      // BSND: kBsndLensQuery / kBsndLensKv bits of the per-batch lengths given
  uint32_t n1;
  uint32_t n2;
  uint32_t g;             // n1 / n2
  uint32_t d;
  uint32_t dr;
  uint32_t dk;            // d + dr: width of the concatenated query/key rows
  uint32_t k;
  float scaleValue;
  uint32_t usedAicNum;    // blockDim of the launch
  uint32_t aivNum;        // 2 * usedAicNum
  uint32_t keyChunk;      // keys per chunk of a query row (row pass)
  uint32_t rowChunk;      // query rows per chunk of a key block (grad key pass)
  uint32_t gatherRows;    // key rows per UB gather tile
  uint32_t ubTileRows;    // rows of a [rows, chunkCols] float32 score tile in UB
  uint32_t mRows;         // matmul rows of a chunk: G (row pass), rowChunk * G (key pass)
  uint32_t chunkCols;     // workspace columns of a chunk: max(keyChunk, block size padded to 16)
  uint32_t sinkTileRows;  // grad with sinks: token rows of wsSink per UB tile of the d_sinks sum
  // Workspace: per-AIV regions first, then global buffers (byte offsets from the user workspace).
  uint64_t aivWsBytes;    // size of one AIV region
  uint64_t wsQf;          // [mRows, dk] 16-bit: gathered cat(q, q_rope) rows
  uint64_t wsKf;          // [chunkCols, dk] 16-bit: gathered cat(key, key_rope) rows
  uint64_t wsV;           // [chunkCols, d] 16-bit: gathered value rows
  uint64_t wsDo;          // [mRows, d] 16-bit: gathered d_out rows (grad)
  uint64_t wsS;           // [mRows, chunkCols] float32: scores
  uint64_t wsDp;          // [mRows, chunkCols] float32: dP (grad)
  uint64_t wsP;           // [mRows, chunkCols] 16-bit: probabilities
  uint64_t wsDs;          // [mRows, chunkCols] 16-bit: dS (grad)
  uint64_t wsAcc;         // [mRows, dk] float32: output accumulator (forward) / dQ accumulator (grad)
  uint64_t wsDk;          // [AlignUp(bs, 16), dk] float32: dK block accumulator (grad key pass)
  uint64_t wsDv;          // [AlignUp(bs, 16), d] float32: dV block accumulator (grad key pass)
  uint64_t wsDelta;       // global [t1 * n1] float32: rowsum(dO * O) (grad)
  uint64_t wsSink;        // global [t1 * n1] float32: -P_sink * delta per query head (grad with sinks)
  uint64_t workspaceBytes;
  // One tiling per Matmul object (see ComputeSfaTiling); mmDp / mmDv record the second use
  // of the A·Bᵀ / Aᵀ·B objects, whose tilings mmScore / mmDk cover.
  MatmulTiling mmScore;  // S = Qf Kfᵀ, grad also dP = dO Vᵀ  (A·Bᵀ object)
  MatmulTiling mmPv;     // O = P V (forward, A·B object)
  MatmulTiling mmDp;     // dP = dO Vᵀ (grad)
  MatmulTiling mmDq;     // dQf = dS Kf (grad, A·B object)
  MatmulTiling mmDk;     // dKf = dSᵀ Qf, also dV = Pᵀ dO (grad key pass, Aᵀ·B object)
  MatmulTiling mmDv;     // dV = Pᵀ dO (grad key pass)
  uint32_t rowStart[kMaxAiv + 1];
  uint32_t keyRowStart[kMaxAiv + 1];
};

// ---------------------------------------------------------------- UB plan of one AIV
// Every UB buffer the kernels allocate (they allocate exactly these), so Total() is their
// footprint. cw = chunk columns (keys per chunk), m = matmul rows of a chunk.
struct SfaUbPlan {
  uint32_t gatherBytes;  // [gatherRows, dk] 16-bit: rows on their way GM -> UB -> workspace
  uint32_t scoreBytes;   // [tileRows, AlignUp(cw, 8)] float32: scores / probabilities
  uint32_t auxBytes;     // same (grad only): dP / dS
  uint32_t ioBytes;      // [tileRows, AlignUp(cw, 16)] 16-bit: P (and dS for grad) to the workspace
  uint32_t rowFBytes;    // [AlignUp(dk, 8)] float32: one head row
  uint32_t rowHBytes;    // [AlignUp(dk, 16)] 16-bit: one head row
  uint32_t statBytes;    // [AlignUp(m, 8)] float32: one per-row statistic
  uint32_t workBytes;    // ReduceSum/ReduceMax scratch for max(cw, dk) floats
  uint32_t sinkBytes;    // [AlignUp(n1, 8)] float32 (grad with sinks): the d_sinks accumulator
  uint32_t ioCount;      // 1 forward (P), 2 grad (P, dS)
  uint32_t rowCount;     // head-row buffers: 1 forward, 2 grad (dO and O for delta)
  static constexpr uint32_t kStats = 5;     // max, sum, and three scratch vectors
  static constexpr uint32_t kRedBytes = 32;  // one reduce result
  __aicore__ uint64_t Total() const {
    return uint64_t{gatherBytes} + scoreBytes + auxBytes + uint64_t{ioCount} * ioBytes +
           uint64_t{rowCount} * (rowFBytes + rowHBytes) + kStats * uint64_t{statBytes} + kRedBytes + workBytes +
           sinkBytes;
  }
};

// sink_heads: N1 for the grad with sinks (its d_sinks accumulator), else 0.
__aicore__ inline SfaUbPlan PlanSfaUb(bool grad, uint32_t gather_rows, uint32_t tile_rows, uint32_t cw, uint32_t dk,
                                      uint32_t m, uint32_t sink_heads) {
  SfaUbPlan p{};
  p.gatherBytes = static_cast<uint32_t>(AlignUp(uint64_t{gather_rows} * dk * kElemBytes16, kUbAlignBytes));
  p.scoreBytes = static_cast<uint32_t>(uint64_t{tile_rows} * AlignUp(cw, 8) * 4);
  p.auxBytes = grad ? p.scoreBytes : 0;
  p.ioBytes = static_cast<uint32_t>(uint64_t{tile_rows} * AlignUp(cw, 16) * kElemBytes16);
  p.rowFBytes = static_cast<uint32_t>(AlignUp(dk, 8) * 4);
  p.rowHBytes = static_cast<uint32_t>(AlignUp(dk, 16) * kElemBytes16);
  p.statBytes = static_cast<uint32_t>(AlignUp(m, 8) * 4);
  p.workBytes = ReduceScratchFloats(cw > dk ? cw : dk) * 4;
  p.ioCount = grad ? 2 : 1;
  p.rowCount = grad ? 2 : 1;
  p.sinkBytes = static_cast<uint32_t>(AlignUp(sink_heads, 8) * 4);
  return p;
}

// ---------------------------------------------------------------- checks
// The shape and the platform; nullptr when they can be tiled (the attributes' Ascend limits are the
// table's, checked by the op_host before any tiling).
inline const char* CheckSfaInputs(const SfaShape& s, const CubePlatform& p) {
  if (const char* err = CheckCubePlatform(p)) return err;
  if (s.n1 == 0 || s.n2 == 0 || s.n1 % s.n2 != 0) return "N1 must be a positive multiple of N2";
  if (s.d == 0 || s.d % 16 != 0) return "head dim D must be a positive multiple of 16 (32-byte rows)";
  if (s.dr % 16 != 0) return "rope dim Dr must be a multiple of 16 (32-byte rows)";
  if (s.k == 0) return "sparse_indices needs at least one slot (K >= 1)";
  if (const char* err = CheckSeqShape(s.seq)) return err;
  if (s.seq.t1 * s.n1 > UINT32_MAX || s.seq.t2 * s.n2 > UINT32_MAX || s.k > 65535 || s.d + s.dr > 4096) {
    return "shape out of range (T*N < 2^32, K <= 65535, D + Dr <= 4096)";
  }
  return nullptr;
}

enum class SfaKernel { kForward, kGrad };

// The whole tiling of either kernel into `Data` (SfaTilingData plus the op's table attributes,
// `attrs`, which it copies for the kernel): the attributes it reads are the block size, the mask
// and the scale.
template <typename Data>
inline TilingResult<Data> ComputeSfaTiling(SfaKernel kernel, const SfaShape& shape, const decltype(Data::attrs)& a,
                                           const SeqLengths& lens, const CubePlatform& p) {
  TilingResult<Data> r{false, nullptr, {}, 0, 0};
  if (const char* err = CheckSfaInputs(shape, p)) {
    r.error = err;
    return r;
  }
  SfaShape s = shape;
  s.seq = Normalised(shape.seq);
  const bool grad = kernel == SfaKernel::kGrad;
  Data& t = r.data;
  t.attrs = a;
  SetSeqFields(t, s.seq);
  t.sparseMode = static_cast<uint32_t>(a.sparse_mode);
  t.blockSize = static_cast<uint32_t>(a.sparse_block_size);
  t.hasRope = s.dr > 0 ? 1 : 0;
  t.seqLensInt64 = s.seqLensInt64 ? 1 : 0;
  t.hasValue = s.valueAbsent ? 0 : 1;
  t.hasSinks = s.sinksPresent ? 1 : 0;
  t.n1 = static_cast<uint32_t>(s.n1);
  t.n2 = static_cast<uint32_t>(s.n2);
  t.g = static_cast<uint32_t>(s.n1 / s.n2);
  t.d = static_cast<uint32_t>(s.d);
  t.dr = static_cast<uint32_t>(s.dr);
  t.dk = t.d + t.dr;
  t.k = static_cast<uint32_t>(s.k);
  t.scaleValue = static_cast<float>(a.scale_value);

  // Cores: never more AIVs than query rows (at least one core).
  t.usedAicNum = UsedAic(s.seq.t1 * s.n2, p);
  t.aivNum = 2 * t.usedAicNum;
  SplitQueryRows(s.seq, s.n2, RowWork{a.sparse_mode, s.k * t.blockSize}, lens, t.aivNum, t.rowStart);
  SplitEvenly(s.seq.t2 * s.n2, t.aivNum, t.keyRowStart);

  // Key chunk: as many keys as the UB score tile allows, a multiple of 16, at most 512 and not
  // above the keys a row can select. The key pass (grad) uses blocks of <= 64 keys, so its
  // chunk width is the block size padded to 16 and its row chunk fills up to 128 matmul rows.
  const uint64_t max_keys = s.k * t.blockSize;
  t.keyChunk = static_cast<uint32_t>(AlignUp(max_keys < kMaxKeyChunk ? max_keys : kMaxKeyChunk, kCubeAlign));
  t.rowChunk = grad ? static_cast<uint32_t>(t.g >= 128 ? 1 : 128 / t.g) : 0;
  const uint32_t m_rows = grad ? (t.g > t.rowChunk * t.g ? t.g : t.rowChunk * t.g) : t.g;
  const uint32_t block_cols = static_cast<uint32_t>(AlignUp(t.blockSize, kCubeAlign));
  t.gatherRows = 16;
  t.mRows = m_rows;
  // UB: score tiles of ubTileRows rows; shrink the chunk, then the tile rows, until it fits.
  uint32_t tile_rows = m_rows < 64 ? m_rows : 64;
  const auto cols = [&] { return t.keyChunk > block_cols ? t.keyChunk : block_cols; };
  const uint32_t sink_heads = grad && s.sinksPresent ? t.n1 : 0;
  const auto plan = [&] { return PlanSfaUb(grad, t.gatherRows, tile_rows, cols(), t.dk, m_rows, sink_heads); };
  while (plan().Total() > p.ubBytes) {
    if (t.keyChunk > 128) {
      t.keyChunk /= 2;
    } else if (tile_rows > 8) {
      tile_rows /= 2;
    } else if (t.gatherRows > 1) {
      t.gatherRows /= 2;
    } else {
      r.error = "a score tile of these dims does not fit in the unified buffer";
      return r;
    }
  }
  t.ubTileRows = tile_rows;
  t.chunkCols = cols();
  r.ubBytes = plan().Total();
  if (sink_heads > 0) {
    // The d_sinks sum reads wsSink through the score tile, whole token rows at a time.
    const uint64_t rows = plan().scoreBytes / (AlignUp(sink_heads, 8) * 4);
    if (rows == 0) {
      r.error = "N1 too large for the d_sinks sum's UB tile";
      return r;
    }
    t.sinkTileRows = static_cast<uint32_t>(rows < 4095 ? rows : 4095);  // DataCopyPad's blockCount limit
  }

  // Matmul tilings, one per Matmul object (an object serves every use of its transpose mode):
  //   A·Bᵀ: S = Qf Kfᵀ (K = dk) and, in the grad, dP = dO Vᵀ (K = d <= dk)   -> mmScore
  //   A·B : O = P V (forward, N = d) / dQf = dS Kf (grad, N = dk)            -> mmPv / mmDq
  //   Aᵀ·B: dKf = dSᵀ Qf (N = dk) and dV = Pᵀ dO (N = d), grad key pass       -> mmDk
  // mmDp and mmDv record the second use's own shape for reference.
  const uint32_t c = t.chunkCols;
  t.mmScore = PlanMatmul(m_rows, c, t.dk, p);
  t.mmPv = PlanMatmul(t.g, t.d, c, p);
  if (grad) {
    t.mmDp = PlanMatmul(m_rows, c, t.d, p);
    t.mmDq = PlanMatmul(t.g, t.dk, c, p);
    t.mmDk = PlanMatmul(block_cols, t.dk, m_rows, p);
    t.mmDv = PlanMatmul(block_cols, t.d, m_rows, p);
  }
  const MatmulTiling* all[] = {&t.mmScore, &t.mmPv, &t.mmDp, &t.mmDq, &t.mmDk, &t.mmDv};
  for (const MatmulTiling* mm : all) {
    if (mm->m != 0 && !MatmulFits(*mm, p)) {
      r.error = "no matmul base block fits L0A/L0B/L0C";
      return r;
    }
  }

  // Workspace: per-AIV regions (512-byte aligned pieces), then the global delta buffer and, for
  // the grad with sinks, the per-head sink terms the d_sinks sum reads.
  const uint32_t cw = c;
  WorkspaceCursor take;
  uint64_t& off = take.off;
  t.wsQf = take(uint64_t{m_rows} * t.dk * kElemBytes16);
  t.wsKf = take(uint64_t{cw} * t.dk * kElemBytes16);
  t.wsV = take(uint64_t{cw} * t.d * kElemBytes16);
  t.wsDo = grad ? take(uint64_t{m_rows} * t.d * kElemBytes16) : off;
  t.wsS = take(uint64_t{m_rows} * cw * 4);
  t.wsDp = grad ? take(uint64_t{m_rows} * cw * 4) : off;
  t.wsP = take(uint64_t{m_rows} * cw * kElemBytes16);
  t.wsDs = grad ? take(uint64_t{m_rows} * cw * kElemBytes16) : off;
  t.wsAcc = take(uint64_t{m_rows} * t.dk * 4);
  t.wsDk = grad ? take(uint64_t{block_cols} * t.dk * 4) : off;
  t.wsDv = grad ? take(uint64_t{block_cols} * t.d * 4) : off;
  t.aivWsBytes = off;
  t.wsDelta = off * t.aivNum;
  t.wsSink = t.wsDelta + (grad ? AlignUp(s.seq.t1 * s.n1 * 4, 512) : 0);
  t.workspaceBytes = t.wsSink + (sink_heads > 0 ? AlignUp(s.seq.t1 * s.n1 * 4, 512) : 0);
  r.workspaceBytes = t.workspaceBytes;
  r.ok = true;
  return r;
}

}  // namespace mgo::tiling
