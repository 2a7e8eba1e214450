// Tiling pieces of the index-score backward that SparseLightningIndexerGradKLLoss and
// LightningIndexerGrad share: Sx = q_index Kiᵀ over a token's visible selected keys (all at once,
// kPad columns), d_weights / dS / d_query_index from it, and the key pass that sums d_key_index
// by key-block ownership. Both tiling data structs name these fields alike, so the functions are
// templates over the struct (as SetSeqFields). Plain C++17 over <cstdint>.
#pragma once

#include <cstdint>

#include "indexer_tiling_common.h"

namespace mgo::tiling {

inline constexpr uint32_t kIndexerKeyBlock = 16;  // key tokens per key-pass block (one fractal edge)
inline constexpr uint32_t kIndexerPairRows = 128;  // matmul rows of a key-pass chunk (pairs x nIdx)

// Key pass: blocks of kIndexerKeyBlock consecutive key tokens in global token order (fixed by the
// shape alone, so the bits never depend on the core count), split evenly over the AIVs; a chunk
// holds rowChunk (query token, slot) pairs, i.e. mKey = rowChunk * nIdx matmul rows.
// Needs t.t2, t.nIdx, t.aivNum.
template <typename Tiling>
inline void SetIndexerKeyPass(Tiling& t) {
  t.keyBlock = kIndexerKeyBlock;
  t.keyBlocks = static_cast<uint32_t>((uint64_t{t.t2} + t.keyBlock - 1) / t.keyBlock);
  SplitEvenly(t.keyBlocks, t.aivNum, t.keyBlockStart);
  t.rowChunk = t.nIdx >= kIndexerPairRows ? 1 : kIndexerPairRows / t.nIdx;
  t.mKey = t.rowChunk * t.nIdx;
}

// The three Matmul objects: A·Bᵀ (Sx, row and key pass; plus whatever else the kernel multiplies
// that way, given as m_nt x n_nt x k_nt maxima), A·B (d_query_index = dS Ki) and Aᵀ·B
// (d_key_index block += Coefᵀ Qi). Returns an error text or nullptr.
template <typename Tiling>
inline const char* PlanIndexerGradMatmuls(Tiling& t, uint64_t m_nt, uint64_t n_nt, uint64_t k_nt,
                                          const CubePlatform& p) {
  const auto max = [](uint64_t x, uint64_t y) { return x > y ? x : y; };
  t.mmNT = PlanMatmul(max(m_nt, max(t.nIdx, t.mKey)), max(n_nt, t.kPad), max(k_nt, t.dIdx), p);
  t.mmNN = PlanMatmul(t.nIdx, t.dIdx, t.kPad, p);
  t.mmTN = PlanMatmul(t.keyBlock, t.dIdx, t.mKey, p);
  for (const MatmulTiling* mm : {&t.mmNT, &t.mmNN, &t.mmTN}) {
    if (!MatmulFits(*mm, p)) return "no matmul base block fits L0A/L0B/L0C";
  }
  return nullptr;
}

// The per-AIV workspace pieces of the index-score backward, taken in this order with `take`
// (bytes -> offset, 512-byte aligned).
template <typename Tiling, typename Take>
inline void TakeIndexerGradWorkspace(Tiling& t, Take&& take) {
  t.wsKi = take(uint64_t{t.kPad} * t.dIdx * kElemBytes16);     // [kPad, dIdx] visible key_index rows
  t.wsSx = take(uint64_t{t.nIdx} * t.kPad * 4);                // [nIdx, kPad] float32 Sx
  t.wsDs = take(uint64_t{t.nIdx} * t.kPad * kElemBytes16);     // [nIdx, kPad] dI w [Sx > 0]
  t.wsDq = take(uint64_t{t.nIdx} * t.dIdx * 4);                // [nIdx, dIdx] float32 d_query_index
  t.wsQi = take(uint64_t{t.mKey} * t.dIdx * kElemBytes16);     // [mKey, dIdx] key-pass query_index rows
  t.wsKb = take(uint64_t{t.keyBlock} * t.dIdx * kElemBytes16); // [keyBlock, dIdx] key block rows
  t.wsSxk = take(uint64_t{t.mKey} * t.keyBlock * 4);           // [mKey, keyBlock] float32 key-pass Sx
  t.wsCoef = take(uint64_t{t.mKey} * t.keyBlock * kElemBytes16);  // [mKey, keyBlock] coefficients
  t.wsDkb = take(uint64_t{t.keyBlock} * t.dIdx * 4);           // [keyBlock, dIdx] float32 accumulator
}

// Every UB buffer an index-score backward kernel allocates (it allocates exactly these), so
// Total() is its footprint. The shared core uses three of the kVecCount float32 [kPad] vectors
// (Sx row, scratch, dI by column) and two of the kHeadCount head vectors (weights / key-pass
// coefficients, d_weights); a kernel may add its own.
template <uint32_t kVecCount, uint32_t kHeadCount>
struct IndexerGradUbPlan {
  uint32_t gatherBytes;  // [gatherRows, widest gathered row] 16-bit
  uint32_t tileBytes;    // float32 tile: at least the key-pass [mKey, keyBlock] Sx / coefficients
  uint32_t tile16Bytes;  // [mKey, keyBlock] 16-bit key-pass coefficients
  uint32_t vecBytes;     // [kPad] float32, kVecs of them
  uint32_t vec16Bytes;   // [kPad] 16-bit: one dS row on its way to the workspace
  uint32_t headBytes;    // [AlignUp(heads, 8)] float32, kHeads of them
  uint32_t wBytes;       // [AlignUp(nIdx, 16)] weights as stored (16-bit or float32)
  uint32_t rowFBytes;    // [AlignUp(dIdx, 8)] float32: one output row
  uint32_t rowHBytes;    // [AlignUp(dIdx, 16)] 16-bit: one output row
  uint32_t workBytes;    // ReduceSum/ReduceMax scratch for kPad floats
  static constexpr uint32_t kVecs = kVecCount;
  static constexpr uint32_t kHeads = kHeadCount;
  static constexpr uint32_t kRedBytes = 32;
  __aicore__ uint64_t Total() const {
    return uint64_t{gatherBytes} + tileBytes + tile16Bytes + kVecs * uint64_t{vecBytes} + vec16Bytes +
           kHeads * uint64_t{headBytes} + wBytes + rowFBytes + rowHBytes + workBytes + kRedBytes;
  }
};

// The plan for a kernel whose widest gathered row is gather_width elements, whose float32 tile
// needs tile_bytes (at least the key pass's) and whose head vectors hold heads (at least
// max(nIdx, mKey)) floats.
template <typename Plan, typename Tiling>
__aicore__ inline Plan PlanIndexerGradUb(const Tiling& t, bool weights_f32, uint32_t gather_width, uint64_t tile_bytes,
                                         uint32_t heads) {
  Plan p{};
  p.gatherBytes = static_cast<uint32_t>(AlignUp(uint64_t{t.gatherRows} * gather_width * kElemBytes16, kUbAlignBytes));
  p.tileBytes = static_cast<uint32_t>(tile_bytes);
  p.tile16Bytes = static_cast<uint32_t>(uint64_t{t.mKey} * t.keyBlock * kElemBytes16);
  p.vecBytes = t.kPad * 4;
  p.vec16Bytes = t.kPad * kElemBytes16;
  p.headBytes = static_cast<uint32_t>(AlignUp(heads, 8) * 4);
  p.wBytes = static_cast<uint32_t>(AlignUp(uint64_t{t.nIdx} * (weights_f32 ? 4 : 2), kUbAlignBytes));
  p.rowFBytes = static_cast<uint32_t>(AlignUp(t.dIdx, 8) * 4);
  p.rowHBytes = static_cast<uint32_t>(AlignUp(t.dIdx, 16) * kElemBytes16);
  p.workBytes = ReduceScratchFloats(t.kPad) * 4;
  return p;
}

}  // namespace mgo::tiling
