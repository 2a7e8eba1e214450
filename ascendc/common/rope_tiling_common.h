// Pure tiling shared by the RoPE family (rope forward and rope_grad): rows are tokens, each
// `hidden` wide (hidden / 128 heads of 128); cos/sin rows are 128 wide.
#pragma once

#include <cstdint>

#include "tiling_common.h"

namespace mgo::tiling {

inline constexpr uint32_t kRopeHeadDim = 128;

// Copied verbatim into the kernel's tiling GM buffer: keep it trivially copyable.
struct RopeTilingData {
  uint32_t nTokens;
  uint32_t hidden;
  uint32_t headNum;
  uint32_t maxSeqLen;
  uint32_t batch;         // entries of q_seq_len
  uint32_t usedCoreNum;
  uint32_t rowsPerCore;
  uint32_t rowsRemainder;
  uint32_t tileRows;      // tokens per UB tile
};

// Byte size of every UB buffer for a tile of `tile_rows` tokens; the kernel allocates exactly
// these, so UbTotal() is the kernel's UB footprint.
struct RopeUbPlan {
  uint32_t ioBytes;        // one q/k tile in the I/O dtype (x2 buffers in, x2 out)
  uint32_t trigBytes;      // cos rows then sin rows in the I/O dtype (x2 buffers)
  uint32_t rowsF32Bytes;   // one tile in float32 (input and output copies)
  uint32_t trigF32Bytes;   // cos, sin, and the derived weights in float32
  uint32_t tmpBytes;       // one head's cross term
  static constexpr uint32_t kQueueDepth = 2;
  __aicore__ uint64_t UbTotal() const {
    return kQueueDepth * (2ull * ioBytes + trigBytes) + 2ull * rowsF32Bytes + 3ull * trigF32Bytes + tmpBytes;
  }
};

__aicore__ inline RopeUbPlan PlanRopeUb(uint32_t tile_rows, uint32_t hidden) {
  RopeUbPlan p{};
  p.ioBytes = tile_rows * hidden * kElemBytes16;
  p.trigBytes = tile_rows * 2 * kRopeHeadDim * kElemBytes16;
  p.rowsF32Bytes = tile_rows * hidden * 4;
  p.trigF32Bytes = tile_rows * kRopeHeadDim * 4;
  p.tmpBytes = kRopeHeadDim * 4;
  return p;
}

struct RopeShape {
  uint64_t nTokens;
  uint64_t hidden;
  uint64_t maxSeqLen;
  uint64_t batch;
};

struct RopeTilingResult {
  bool ok;
  const char* error;  // static text when !ok
  RopeTilingData data;
  uint64_t ubBytes;   // footprint of the chosen tile
};

inline RopeTilingResult ComputeRopeFamilyTiling(const RopeShape& s, uint32_t core_num, uint64_t ub_bytes) {
  RopeTilingResult r{false, nullptr, {}, 0};
  if (s.hidden == 0 || s.hidden % kRopeHeadDim != 0) {
    r.error = "hidden must be a positive multiple of 128";
    return r;
  }
  if (s.maxSeqLen == 0 || s.batch == 0) {
    r.error = "cos/sin need at least one row and q_seq_len at least one entry";
    return r;
  }
  if (core_num == 0) {
    r.error = "core count must be positive";
    return r;
  }
  if (s.nTokens > UINT32_MAX || s.hidden > UINT32_MAX || s.maxSeqLen > UINT32_MAX || s.batch > UINT32_MAX) {
    r.error = "shape too large for 32-bit tiling fields";
    return r;
  }
  const RowSplit split = SplitRows(s.nTokens, core_num);
  const uint64_t max_rows = split.rowsPerCore + (split.rowsRemainder ? 1u : 0u);
  // The footprint is affine in the tile rows: fixed + rows * per_row. Take the largest tile that
  // fits, but no larger than one core's share.
  const auto hidden = static_cast<uint32_t>(s.hidden);
  const uint64_t fixed = PlanRopeUb(0, hidden).UbTotal();
  const uint64_t per_row = PlanRopeUb(1, hidden).UbTotal() - fixed;
  uint64_t tile = ub_bytes > fixed ? (ub_bytes - fixed) / per_row : 0;
  if (tile > max_rows) tile = max_rows == 0 ? 1 : max_rows;
  if (tile == 0) {
    r.error = "one token of this hidden size does not fit in the unified buffer";
    return r;
  }
  r.data = RopeTilingData{static_cast<uint32_t>(s.nTokens), static_cast<uint32_t>(s.hidden),
                          static_cast<uint32_t>(s.hidden / kRopeHeadDim), static_cast<uint32_t>(s.maxSeqLen),
                          static_cast<uint32_t>(s.batch), split.usedCoreNum, split.rowsPerCore,
                          split.rowsRemainder, static_cast<uint32_t>(tile)};
  r.ubBytes = PlanRopeUb(static_cast<uint32_t>(tile), static_cast<uint32_t>(s.hidden)).UbTotal();
  r.ok = true;
  return r;
}

}  // namespace mgo::tiling
