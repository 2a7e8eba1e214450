// Pure tiling shared by cla_gate_merge and cla_gate_backward. Rows are (token, head) pairs of
// the [T, N, D] tensors, each D wide; the gate logits [T, N] hold one value per row, so a
// tile of R rows moves R*D elements per attention tensor and R elements per gate tensor.
#pragma once

#include <cstdint>

#include "tiling_common.h"

namespace mgo::tiling {

// Row alignment of the gate vectors in UB: 16 elements = one 32-byte block of a 16-bit type,
// so the global and local gate halves of a buffer both start 32-byte aligned.
inline constexpr uint32_t kGateAlignElems = 16;

struct ClaGateTilingData {
  uint32_t tokens;
  uint32_t heads;
  uint32_t headDim;
  uint32_t usedCoreNum;
  uint32_t rowsPerCore;
  uint32_t rowsRemainder;
  uint32_t tileRows;
  uint32_t gateStride;  // AlignUp(tileRows, 16): offset of the local gate half in gate buffers
};

// ReduceSum scratch for D float elements: one partial per 64 floats, rounded to 8 (32 bytes).
__aicore__ inline uint32_t ReduceWorkFloats(uint32_t d) {
  return static_cast<uint32_t>(AlignUp((d + 63) / 64, 8));
}

// Every UB buffer of the two kernels for a tile of `rows` rows; the kernels allocate exactly
// these, so the totals are their UB footprints.
struct ClaGateUbPlan {
  uint32_t ioBytes;       // one [rows, D] tile in the I/O dtype
  uint32_t gateIoBytes;   // global + local gate rows in the I/O dtype
  uint32_t rowsF32Bytes;  // one [rows, D] tile in float32
  uint32_t gateF32Bytes;  // global + local gate rows in float32
  uint32_t prodBytes;     // one row of G*O (backward)
  uint32_t redBytes;      // two ReduceSum results, 32 bytes apart (backward)
  uint32_t workBytes;     // ReduceSum scratch (backward)
  static constexpr uint32_t kQueueDepth = 2;

  // Inputs G, O_g, O_l, z; outputs dO_g, dO_l, dz; float G, O_g, O_l; gates s, sums, aux.
  __aicore__ uint64_t BackwardTotal() const {
    return kQueueDepth * (3ull * ioBytes + gateIoBytes) + kQueueDepth * (2ull * ioBytes + gateIoBytes) +
           3ull * rowsF32Bytes + 3ull * gateF32Bytes + prodBytes + redBytes + workBytes;
  }
  // Inputs O_g, O_l, z; output merged; float O_g, O_l; gates s, aux.
  __aicore__ uint64_t MergeTotal() const {
    return kQueueDepth * (2ull * ioBytes + gateIoBytes) + kQueueDepth * ioBytes + 2ull * rowsF32Bytes +
           2ull * gateF32Bytes;
  }
};

__aicore__ inline uint32_t GateStride(uint32_t rows) {
  return static_cast<uint32_t>(AlignUp(rows, kGateAlignElems));
}

__aicore__ inline ClaGateUbPlan PlanClaGateUb(uint32_t rows, uint32_t d) {
  ClaGateUbPlan p{};
  p.ioBytes = rows * d * kElemBytes16;
  p.gateIoBytes = 2 * GateStride(rows) * kElemBytes16;
  p.rowsF32Bytes = rows * d * 4;
  p.gateF32Bytes = 2 * GateStride(rows) * 4;
  p.prodBytes = d * 4;
  p.redBytes = 64;
  p.workBytes = ReduceWorkFloats(d) * 4;
  return p;
}

struct ClaGateShape {
  uint64_t tokens;
  uint64_t heads;
  uint64_t headDim;
};

enum class ClaGateKernel { kMerge, kBackward };

struct ClaGateTilingResult {
  bool ok;
  const char* error;
  ClaGateTilingData data;
  uint64_t ubBytes;
};

__aicore__ inline uint64_t ClaGateFootprint(ClaGateKernel k, uint32_t rows, uint32_t d) {
  const ClaGateUbPlan p = PlanClaGateUb(rows, d);
  return k == ClaGateKernel::kMerge ? p.MergeTotal() : p.BackwardTotal();
}

inline ClaGateTilingResult ComputeClaGateTiling(ClaGateKernel kernel, const ClaGateShape& s, uint32_t core_num,
                                                uint64_t ub_bytes) {
  ClaGateTilingResult r{false, nullptr, {}, 0};
  // 16-bit rows must be whole 32-byte blocks for DataCopy (the CANN op itself allows D 128/256).
  if (s.headDim == 0 || s.headDim % 16 != 0) {
    r.error = "head dim D must be a positive multiple of 16";
    return r;
  }
  if (core_num == 0) {
    r.error = "core count must be positive";
    return r;
  }
  const uint64_t rows = s.tokens * s.heads;
  if (s.heads == 0 || rows > UINT32_MAX || s.headDim > 65536) {
    r.error = "shape out of range (N must be positive, T*N < 2^32, D <= 65536)";
    return r;
  }
  const RowSplit split = SplitRows(rows, core_num);
  const uint64_t max_rows = split.rowsPerCore + (split.rowsRemainder ? 1u : 0u);
  const auto d = static_cast<uint32_t>(s.headDim);
  // The footprint is affine in rows at multiples of 16 (the gate alignment): estimate from
  // that slope, then step down until the aligned footprint really fits.
  const uint64_t fixed = ClaGateFootprint(kernel, 0, d);
  const uint64_t per_row = (ClaGateFootprint(kernel, kGateAlignElems, d) - fixed) / kGateAlignElems;
  uint64_t tile = ub_bytes > fixed ? (ub_bytes - fixed) / per_row : 0;
  const uint64_t cap = max_rows == 0 ? 1 : max_rows;
  if (tile > cap) tile = cap;
  while (tile > 0 && ClaGateFootprint(kernel, static_cast<uint32_t>(tile), d) > ub_bytes) --tile;
  if (tile == 0) {
    r.error = "one row of this head dim does not fit in the unified buffer";
    return r;
  }
  r.data = ClaGateTilingData{static_cast<uint32_t>(s.tokens), static_cast<uint32_t>(s.heads), d,
                             split.usedCoreNum, split.rowsPerCore, split.rowsRemainder,
                             static_cast<uint32_t>(tile), GateStride(static_cast<uint32_t>(tile))};
  r.ubBytes = ClaGateFootprint(kernel, static_cast<uint32_t>(tile), d);
  r.ok = true;
  return r;
}

}  // namespace mgo::tiling
