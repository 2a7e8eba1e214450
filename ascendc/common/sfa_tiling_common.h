// Pure tiling shared by sparse_flash_attention (forward) and sparse_flash_attention_grad.
// Mixed kernels (one AIC + two AIV per AI core). Work units:
//   * a "query row" is (token t, key group g): G = N1 / N2 heads, K index slots;
//     query rows are split over the AIVs in contiguous ranges balanced by visible-key work;
//   * a "key row" is (key token, g); the grad's key pass (dK/dV by key ownership) splits key
//     rows over the AIVs in contiguous ranges of equal size.
// Selected keys are processed in chunks of `keyChunk` keys (gathered by the AIV into a per-AIV
// GM workspace, multiplied by the AIC through the high-level Matmul object).
// Plain C++17 over <cstdint>: compiles for the host tiling, the device and the CPU twin.
#pragma once

#include <cstdint>

#include "tiling_common.h"

namespace mgo::tiling {

enum class SfaLayout : uint32_t { kBSND = 0, kTND = 1 };

inline constexpr uint32_t kSfaMaxAic = 64;              // tiling arrays hold up to 2*64 AIVs
inline constexpr uint32_t kSfaMaxAiv = 2 * kSfaMaxAic;
inline constexpr uint32_t kCubeAlign = 16;              // cube fractal edge (16 x 16 elements)
inline constexpr uint32_t kMaxKeyChunk = 512;           // keys per chunk, as CANN uses
inline constexpr uint32_t kRowOverheadKeys = 16;        // balance weight of a row with no key

// Sizes of one AI core's memories and the AIC count (the blockDim of a mixed launch).
struct CubePlatform {
  uint32_t aicNum;
  uint64_t ubBytes;   // per AIV
  uint64_t l1Bytes;   // per AIC
  uint64_t l0aBytes;
  uint64_t l0bBytes;
  uint64_t l0cBytes;
};
// Atlas A2 (910B): 24 AIC / 48 AIV, UB 192 KiB, L1 512 KiB, L0A/L0B 64 KiB, L0C 128 KiB.
inline constexpr CubePlatform kAtlasA2Platform{24, 192 * 1024, 512 * 1024, 64 * 1024, 64 * 1024, 128 * 1024};

// A mixed (cube + vector) kernel may not fill all the UB the platform reports: the framework
// keeps its last 256 bytes (the Matmul client's message; Atlas A2/A3: ASC_UB_SIZE = 192 KiB - 256).
inline constexpr uint64_t kMixUbReservedBytes = 256;
__aicore__ inline constexpr uint64_t MixUbBudget(const CubePlatform& p) {
  return p.ubBytes > kMixUbReservedBytes ? p.ubBytes - kMixUbReservedBytes : 0;
}

// Shapes as the op sees them. BSND: batch = B, s1/s2 = S1/S2, t1 = B*S1, t2 = B*S2.
// TND: batch = entries of actual_seq_lengths_*, s1/s2 unused (0), t1/t2 = T1/T2; batch = 0 means
// the lengths are absent (zero-size placeholder or no tensor): one sequence of T1 queries and
// T2 keys, which the tiling lays out as BSND with B = 1 (same memory and statistics layout).
struct SfaShape {
  SfaLayout layout;
  uint64_t batch;
  uint64_t s1;
  uint64_t s2;
  uint64_t t1;
  uint64_t t2;
  uint64_t n1;
  uint64_t n2;
  uint64_t d;   // head dim of query/key/value
  uint64_t dr;  // rope dim; 0 = no query_rope/key_rope inputs
  uint64_t k;   // index slots per query row
  bool seqLensInt64 = false;  // actual_seq_lengths_* are int64 (else int32)
  bool valueAbsent = false;   // no value input: key is value (forward v = key; grad d_key = dK + dV
                              // summed in float32 and rounded once, no d_value written)
};

struct SfaAttrs {
  float scaleValue;
  uint32_t sparseBlockSize;
  uint32_t sparseMode;   // 0 or 3
  bool deterministic;    // grad only; the kernels are deterministic in every mode (recorded only)
};

// Cumulative TND lengths (no leading 0) when the host knows their values, for balancing rows
// by visible keys; {nullptr, nullptr, 0} when not (the split is then by rows).
struct SfaSeqLengths {
  const int64_t* q;
  const int64_t* kv;
  uint64_t count;
};

// The cube tiling of one Matmul object: the largest problem it is used for (M, N, Ka = Kb) and
// its L0 base block (baseM x baseK of A, baseK x baseN of B, baseM x baseN float32 of C).
struct SfaMatmulTiling {
  uint32_t m;
  uint32_t n;
  uint32_t k;
  uint32_t baseM;
  uint32_t baseN;
  uint32_t baseK;
};

// Contiguous ranges of query rows (rowStart) or key rows (keyRowStart) per AIV:
// AIV i owns [start[i], start[i+1]).
struct SfaTilingData {
  uint32_t layout;        // SfaLayout
  uint32_t sparseMode;
  uint32_t blockSize;
  uint32_t hasRope;
  uint32_t deterministic;  // recorded; the grad kernel is deterministic in every mode
  uint32_t seqLensInt64;
  uint32_t hasValue;
  uint32_t batch;
  uint32_t s1;
  uint32_t s2;
  uint32_t t1;
  uint32_t t2;
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
  uint64_t workspaceBytes;
  // One tiling per Matmul object (see ComputeSfaTiling); mmDp / mmDv record the second use
  // of the A·Bᵀ / Aᵀ·B objects, whose tilings mmScore / mmDk cover.
  SfaMatmulTiling mmScore;  // S = Qf Kfᵀ, grad also dP = dO Vᵀ  (A·Bᵀ object)
  SfaMatmulTiling mmPv;     // O = P V (forward, A·B object)
  SfaMatmulTiling mmDp;     // dP = dO Vᵀ (grad)
  SfaMatmulTiling mmDq;     // dQf = dS Kf (grad, A·B object)
  SfaMatmulTiling mmDk;     // dKf = dSᵀ Qf, also dV = Pᵀ dO (grad key pass, Aᵀ·B object)
  SfaMatmulTiling mmDv;     // dV = Pᵀ dO (grad key pass)
  uint32_t rowStart[kSfaMaxAiv + 1];
  uint32_t keyRowStart[kSfaMaxAiv + 1];
};

struct SfaTilingResult {
  bool ok;
  const char* error;        // static text when !ok
  SfaTilingData data;
  uint64_t workspaceBytes;  // user workspace (the op_host adds the system workspace)
  uint64_t ubBytes;         // largest UB footprint of an AIV
};

// ---------------------------------------------------------------- visible-key bounds
// Upper bound of visible keys of local query row s1 in a batch of (S1_b, S2_b): the causal
// limit (sparse_mode 3) and K * bs selected keys. Exact when every slot selects a distinct
// fully visible block; used only for balancing.
__aicore__ inline uint64_t SfaRowKeyBound(uint64_t s1, uint64_t s1_len, uint64_t s2_len, uint32_t mode,
                                          uint64_t k, uint32_t bs) {
  uint64_t visible = s2_len;
  if (mode == 3) {
    // s2 <= s1 + S2 - S1  <=>  s2 + S1 <= s1 + S2
    if (s1 + s2_len < s1_len) return 0;
    const uint64_t lim = s1 + s2_len - s1_len + 1;
    visible = lim < s2_len ? lim : s2_len;
  }
  const uint64_t selected = k * bs;
  return visible < selected ? visible : selected;
}

// ---------------------------------------------------------------- matmul base blocks
// Largest baseM/baseN/baseK (multiples of 16, not above the aligned problem) whose double
// buffered A and B blocks fit L0A/L0B and whose float32 C block fits L0C.
inline SfaMatmulTiling PlanMatmul(uint64_t m, uint64_t n, uint64_t k, const CubePlatform& p) {
  SfaMatmulTiling t{static_cast<uint32_t>(m), static_cast<uint32_t>(n), static_cast<uint32_t>(k), 0, 0, 0};
  const auto cap = [](uint64_t v, uint64_t lim) { return AlignUp(v < lim ? v : lim, kCubeAlign); };
  uint64_t bm = cap(m, 128);
  uint64_t bn = cap(n, 256);
  uint64_t bk = cap(k, 64);
  while (bm * bn * 4 > p.l0cBytes && bn > kCubeAlign) bn /= 2;
  while (2 * bm * bk * 2 > p.l0aBytes && bk > kCubeAlign) bk /= 2;
  while (2 * bk * bn * 2 > p.l0bBytes && bn > kCubeAlign) bn /= 2;
  t.baseM = static_cast<uint32_t>(AlignUp(bm, kCubeAlign));
  t.baseN = static_cast<uint32_t>(AlignUp(bn, kCubeAlign));
  t.baseK = static_cast<uint32_t>(AlignUp(bk, kCubeAlign));
  return t;
}

// Whether a base block respects L0A/L0B/L0C (double-buffered A/B) and L1 (one A and B block).
__aicore__ inline bool MatmulFits(const SfaMatmulTiling& t, const CubePlatform& p) {
  const uint64_t a = uint64_t{t.baseM} * t.baseK * 2;
  const uint64_t b = uint64_t{t.baseK} * t.baseN * 2;
  const uint64_t c = uint64_t{t.baseM} * t.baseN * 4;
  return t.baseM % kCubeAlign == 0 && t.baseN % kCubeAlign == 0 && t.baseK % kCubeAlign == 0 &&
         2 * a <= p.l0aBytes && 2 * b <= p.l0bBytes && c <= p.l0cBytes && 2 * (a + b) <= p.l1Bytes;
}

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
  uint32_t ioCount;      // 1 forward (P), 2 grad (P, dS)
  uint32_t rowCount;     // head-row buffers: 1 forward, 2 grad (dO and O for delta)
  static constexpr uint32_t kStats = 5;     // max, sum, and three scratch vectors
  static constexpr uint32_t kRedBytes = 32;  // one reduce result
  __aicore__ uint64_t Total() const {
    return uint64_t{gatherBytes} + scoreBytes + auxBytes + uint64_t{ioCount} * ioBytes +
           uint64_t{rowCount} * (rowFBytes + rowHBytes) + kStats * uint64_t{statBytes} + kRedBytes + workBytes;
  }
};

__aicore__ inline uint32_t ReduceScratchFloats(uint32_t count) {
  const uint32_t partials = (count + 63) / 64;  // one per 256-byte repeat
  return static_cast<uint32_t>(AlignUp(partials, 8));
}

__aicore__ inline SfaUbPlan PlanSfaUb(bool grad, uint32_t gather_rows, uint32_t tile_rows, uint32_t cw, uint32_t dk,
                                      uint32_t m) {
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
  return p;
}

// ---------------------------------------------------------------- checks
inline const char* CheckSfaInputs(const SfaShape& s, const SfaAttrs& a, const CubePlatform& p) {
  if (p.aicNum == 0) return "core count must be positive";
  if (p.aicNum > kSfaMaxAic) return "more than 64 AI cores: the tiling arrays hold 128 AIVs";
  if (s.n1 == 0 || s.n2 == 0 || s.n1 % s.n2 != 0) return "N1 must be a positive multiple of N2";
  if (s.d == 0 || s.d % 16 != 0) return "head dim D must be a positive multiple of 16 (32-byte rows)";
  if (s.dr % 16 != 0) return "rope dim Dr must be a multiple of 16 (32-byte rows)";
  if (s.k == 0) return "sparse_indices needs at least one slot (K >= 1)";
  if (a.sparseBlockSize == 0 || a.sparseBlockSize > 64) return "sparse_block_size must be in [1, 64]";
  if (a.sparseMode != 0 && a.sparseMode != 3) return "sparse_mode must be 0 or 3";
  if (s.batch == 0 && s.layout == SfaLayout::kBSND) return "batch must be positive";
  if (s.layout == SfaLayout::kBSND && (s.t1 != s.batch * s.s1 || s.t2 != s.batch * s.s2)) {
    return "BSND: t1/t2 must equal B*S1/B*S2";
  }
  if (s.t1 * s.n1 > UINT32_MAX || s.t2 * s.n2 > UINT32_MAX || s.k > 65535 || s.d + s.dr > 4096) {
    return "shape out of range (T*N < 2^32, K <= 65535, D + Dr <= 4096)";
  }
  return nullptr;
}

// (S1_b, S2_b) and the first query token of batch b, from the shape or the known lengths.
struct SfaBatchSpan {
  uint64_t q0;
  uint64_t s1;
  uint64_t s2;
};

inline SfaBatchSpan BatchSpan(const SfaShape& s, const SfaSeqLengths& lens, uint64_t b) {
  if (s.layout == SfaLayout::kBSND) return SfaBatchSpan{b * s.s1, s.s1, s.s2};
  const int64_t q_prev = b == 0 ? 0 : lens.q[b - 1];
  const int64_t kv_prev = b == 0 ? 0 : lens.kv[b - 1];
  return SfaBatchSpan{static_cast<uint64_t>(q_prev), static_cast<uint64_t>(lens.q[b] - q_prev),
                      static_cast<uint64_t>(lens.kv[b] - kv_prev)};
}

inline bool LengthsKnown(const SfaShape& s, const SfaSeqLengths& lens) {
  if (s.layout == SfaLayout::kBSND) return true;
  if (lens.q == nullptr || lens.kv == nullptr || lens.count != s.batch) return false;
  int64_t pq = 0;
  int64_t pkv = 0;
  for (uint64_t b = 0; b < lens.count; ++b) {
    if (lens.q[b] < pq || lens.kv[b] < pkv) return false;
    pq = lens.q[b];
    pkv = lens.kv[b];
  }
  return static_cast<uint64_t>(pq) == s.t1 && static_cast<uint64_t>(pkv) == s.t2;
}

// Balance weight of query token t's rows (each of its n2 rows weighs the same).
inline uint64_t TokenWeight(const SfaShape& s, const SfaAttrs& a, const SfaBatchSpan& span, uint64_t local) {
  return kRowOverheadKeys + SfaRowKeyBound(local, span.s1, span.s2, a.sparseMode, s.k, a.sparseBlockSize);
}

// Splits `rows` query rows over `aiv` AIVs into contiguous ranges whose weights stay within one
// row of the mean: boundary i is the first row whose weight prefix reaches i * total / aiv.
inline void SplitQueryRows(const SfaShape& s, const SfaAttrs& a, const SfaSeqLengths& lens, uint32_t aiv,
                           uint32_t* start) {
  const uint64_t rows = s.t1 * s.n2;
  start[0] = 0;
  if (!LengthsKnown(s, lens)) {
    const RowSplit split = SplitRows(rows, aiv);
    for (uint32_t i = 0; i < aiv; ++i) {
      const RowRange r = i < split.usedCoreNum ? CoreRows(split.rowsPerCore, split.rowsRemainder, i)
                                               : RowRange{rows, 0};
      start[i + 1] = static_cast<uint32_t>(r.start + r.count);
    }
    return;
  }
  uint64_t total = 0;
  for (uint64_t b = 0; b < s.batch; ++b) {
    const SfaBatchSpan span = BatchSpan(s, lens, b);
    for (uint64_t i = 0; i < span.s1; ++i) total += s.n2 * TokenWeight(s, a, span, i);
  }
  uint32_t next = 1;
  uint64_t prefix = 0;
  uint64_t row = 0;
  for (uint64_t b = 0; b < s.batch && next < aiv; ++b) {
    const SfaBatchSpan span = BatchSpan(s, lens, b);
    for (uint64_t i = 0; i < span.s1 && next < aiv; ++i) {
      const uint64_t w = TokenWeight(s, a, span, i);
      for (uint64_t g = 0; g < s.n2; ++g) {
        // Close ranges whose target the prefix already reached (before adding this row).
        while (next < aiv && prefix * aiv >= total * next) start[next++] = static_cast<uint32_t>(row);
        prefix += w;
        ++row;
      }
    }
  }
  while (next <= aiv) start[next++] = static_cast<uint32_t>(rows);
}

inline void SplitEvenly(uint64_t rows, uint32_t aiv, uint32_t* start) {
  start[0] = 0;
  for (uint32_t i = 1; i <= aiv; ++i) start[i] = static_cast<uint32_t>(rows * i / aiv);
}

enum class SfaKernel { kForward, kGrad };

// Shapes of the indexer ops without the main attention (lightning_indexer and its grad).
// BSND: batch = B, s1/s2 = S1/S2, t1 = B*S1, t2 = B*S2; TND: batch = entries of the int32
// cumulative lengths, 0 = absent (one sequence).
struct IndexerShape {
  SfaLayout layout;
  uint64_t batch;
  uint64_t s1;
  uint64_t s2;
  uint64_t t1;
  uint64_t t2;
  uint64_t nIdx;  // indexer heads
  uint64_t dIdx;  // indexer head dim
  uint64_t k;     // slots per query token (lightning_indexer: sparse_count)
};

// Tiling key of the indexer ops: the I/O dtype, + 10 when weights are float32.
inline constexpr uint64_t IndexerTilingKey(DType dtype, bool weights_f32) {
  return static_cast<uint64_t>(dtype) + (weights_f32 ? 10u : 0u);
}

// Copies the sequence fields every SFA-family tiling data holds from a normalised shape.
template <typename TilingData>
inline void SetSeqFields(TilingData& t, const SfaShape& s) {
  t.layout = static_cast<uint32_t>(s.layout);
  t.batch = static_cast<uint32_t>(s.batch);
  t.s1 = static_cast<uint32_t>(s.s1);
  t.s2 = static_cast<uint32_t>(s.s2);
  t.t1 = static_cast<uint32_t>(s.t1);
  t.t2 = static_cast<uint32_t>(s.t2);
}

// The whole tiling of either kernel.
// TND without lengths is one sequence: the same problem as BSND with B = 1.
inline SfaShape Normalised(const SfaShape& shape) {
  SfaShape s = shape;
  if (s.layout == SfaLayout::kTND && s.batch == 0) {
    s.layout = SfaLayout::kBSND;
    s.batch = 1;
    s.s1 = s.t1;
    s.s2 = s.t2;
  }
  return s;
}

inline SfaTilingResult ComputeSfaTiling(SfaKernel kernel, const SfaShape& shape, const SfaAttrs& a,
                                        const SfaSeqLengths& lens, const CubePlatform& p) {
  SfaTilingResult r{false, nullptr, {}, 0, 0};
  if (const char* err = CheckSfaInputs(shape, a, p)) {
    r.error = err;
    return r;
  }
  const SfaShape s = Normalised(shape);
  const bool grad = kernel == SfaKernel::kGrad;
  SfaTilingData& t = r.data;
  SetSeqFields(t, s);
  t.sparseMode = a.sparseMode;
  t.blockSize = a.sparseBlockSize;
  t.hasRope = s.dr > 0 ? 1 : 0;
  t.deterministic = a.deterministic ? 1 : 0;
  t.seqLensInt64 = s.seqLensInt64 ? 1 : 0;
  t.hasValue = s.valueAbsent ? 0 : 1;
  t.n1 = static_cast<uint32_t>(s.n1);
  t.n2 = static_cast<uint32_t>(s.n2);
  t.g = static_cast<uint32_t>(s.n1 / s.n2);
  t.d = static_cast<uint32_t>(s.d);
  t.dr = static_cast<uint32_t>(s.dr);
  t.dk = t.d + t.dr;
  t.k = static_cast<uint32_t>(s.k);
  t.scaleValue = a.scaleValue;

  // Cores: never more AIVs than query rows (at least one core).
  const uint64_t rows = s.t1 * s.n2;
  const uint64_t want_aic = (rows + 1) / 2;
  t.usedAicNum = static_cast<uint32_t>(want_aic == 0 ? 1 : (want_aic < p.aicNum ? want_aic : p.aicNum));
  t.aivNum = 2 * t.usedAicNum;
  SplitQueryRows(s, a, lens, t.aivNum, t.rowStart);
  SplitEvenly(s.t2 * s.n2, t.aivNum, t.keyRowStart);

  // Key chunk: as many keys as the UB score tile allows, a multiple of 16, at most 512 and not
  // above the keys a row can select. The key pass (grad) uses blocks of <= 64 keys, so its
  // chunk width is the block size padded to 16 and its row chunk fills up to 128 matmul rows.
  const uint64_t max_keys = s.k * a.sparseBlockSize;
  t.keyChunk = static_cast<uint32_t>(AlignUp(max_keys < kMaxKeyChunk ? max_keys : kMaxKeyChunk, kCubeAlign));
  t.rowChunk = grad ? static_cast<uint32_t>(t.g >= 128 ? 1 : 128 / t.g) : 0;
  const uint32_t m_rows = grad ? (t.g > t.rowChunk * t.g ? t.g : t.rowChunk * t.g) : t.g;
  const uint32_t block_cols = static_cast<uint32_t>(AlignUp(a.sparseBlockSize, kCubeAlign));
  t.gatherRows = 16;
  t.mRows = m_rows;
  // UB: score tiles of ubTileRows rows; shrink the chunk, then the tile rows, until it fits.
  uint32_t tile_rows = m_rows < 64 ? m_rows : 64;
  const auto cols = [&] { return t.keyChunk > block_cols ? t.keyChunk : block_cols; };
  const auto plan = [&] { return PlanSfaUb(grad, t.gatherRows, tile_rows, cols(), t.dk, m_rows); };
  while (plan().Total() > MixUbBudget(p)) {
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
  const SfaMatmulTiling* all[] = {&t.mmScore, &t.mmPv, &t.mmDp, &t.mmDq, &t.mmDk, &t.mmDv};
  for (const SfaMatmulTiling* mm : all) {
    if (mm->m != 0 && !MatmulFits(*mm, p)) {
      r.error = "no matmul base block fits L0A/L0B/L0C";
      return r;
    }
  }

  // Workspace: per-AIV regions (32-byte aligned pieces), then the global delta buffer.
  const uint32_t cw = c;
  uint64_t off = 0;
  const auto take = [&off](uint64_t bytes) {
    const uint64_t at = off;
    off += AlignUp(bytes, 512);  // 512 B: one cube fractal, so every operand starts aligned
    return at;
  };
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
  t.workspaceBytes = t.wsDelta + (grad ? AlignUp(s.t1 * s.n1 * 4, 512) : 0);
  r.workspaceBytes = t.workspaceBytes;
  r.ok = true;
  return r;
}

}  // namespace mgo::tiling
