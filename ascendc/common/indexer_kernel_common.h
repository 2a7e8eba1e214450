// Kernel pieces shared by the indexer kernels (LightningIndexer, the indexer grads, the dense
// pair). Include after "kernel_operator.h" and "lib/matmul_intf.h".
#pragma once

#include <cstdint>
#include <type_traits>

#include "sfa_kernel_common.h"

namespace mgo::kernel {

// The SFA geometry of the indexer's shapes (tiling data `t`: its sequence fields, SetSeqFields):
// N2 = 1, block size 1 (token indices), int32 lengths, G = n1 heads per statistics row (n1 = 1
// where no statistics are read).
template <typename Tiling>
__aicore__ inline SfaTilingData IndexerGeometry(const Tiling& t, uint32_t n1) {
  SfaTilingData g{};
  g.layout = t.layout;
  g.sparseMode = t.sparseMode;
  g.blockSize = 1;
  g.seqLensInt64 = 0;
  g.bsndLens = t.bsndLens;
  g.batch = t.batch;
  g.s1 = t.s1;
  g.s2 = t.s2;
  g.t1 = t.t1;
  g.t2 = t.t2;
  g.n1 = n1;
  g.n2 = 1;
  g.g = n1;
  return g;
}

// Weights row [n] (W = 16-bit or float) -> float32 `dst`, readable by V and the scalar unit;
// `raw` holds the row as stored and may be refilled right after.
template <typename W>
__aicore__ inline void LoadWeightsF32(const LocalTensor<W>& raw, const GlobalTensor<W>& row,
                                      const LocalTensor<float>& dst, uint32_t n) {
  DataCopyPad(raw, row, DataCopyExtParams{1, static_cast<uint32_t>(n * sizeof(W)), 0, 0, 0},
              DataCopyPadExtParams<W>{false, 0, 0, W(0.0f)});
  SyncPipes<HardEvent::MTE2_V>();
  if constexpr (std::is_same_v<W, float>) {
    Adds(dst, raw, 0.0f, n);
  } else {
    Cast(dst, raw, RoundMode::CAST_NONE, n);
  }
  SyncPipes<HardEvent::V_S>();
  SyncPipes<HardEvent::V_MTE2>();
}

// NaN must reach the outputs as the float64 reference's max(x, 0) and d * w * [x > 0] carry it.
// The documented vector Relu is max(x, 0) and leaves NaN unspecified (the twin gives 0), and a
// select on x > 0 drops a NaN d; the scalar unit's IEEE compare (x != x only for NaN) does not.

// [x > 0] as a factor, as the CPU kernel's relu_step: 1 or 0, and NaN for a NaN x.
__aicore__ inline float ReluStep(float x) { return x > 0.0f ? 1.0f : (x != x ? x : 0.0f); }

// dst = relu(src) over n elements with NaN kept: the vector Relu, then the scalar unit writes
// each NaN of src back (+-Inf stay exact: Relu(+Inf) = +Inf, Relu(-Inf) = 0). src was copied
// in (MTE2) or written by V before; dst is ready for V on return.
__aicore__ inline void ReluKeepNan(const LocalTensor<float>& dst, const LocalTensor<float>& src, uint32_t n) {
  Relu(dst, src, n);
  SyncPipes<HardEvent::V_S>();
  SyncPipes<HardEvent::MTE2_S>();
  for (uint32_t j = 0; j < n; ++j) {
    const float x = src.GetValue(j);
    if (x != x) dst.SetValue(j, x);
  }
  SyncPipes<HardEvent::S_V>();
}

// The index scores of one token over `cols` consecutive keys, I_j = sum_g w_g relu(Sx[g, j]) with
// Sx = q_index Kiᵀ: the cube multiplies the token's [nIdx, dIdx] query_index rows by the key_index
// rows in place into ws_sx ([nIdx, cols] float32), then the AIV sums the heads in ascending order
// into `score` (float32, ready for V). `w`: the token's weights (float32, scalar-readable); `sx`
// and `tmp`: [cols] scratch. Shared by LightningIndexer and the dense indexer ops.
template <typename Mm, typename T>
__aicore__ inline void IndexScores(Mm& mm, const GlobalTensor<T>& qi_rows, const GlobalTensor<T>& ki_rows,
                                   const GlobalTensor<float>& ws_sx, uint32_t n_idx, uint32_t d_idx, uint32_t cols,
                                   const LocalTensor<float>& w, const LocalTensor<float>& score,
                                   const LocalTensor<float>& sx, const LocalTensor<float>& tmp) {
  mm.SetOrgShape(n_idx, cols, d_idx, d_idx);
  mm.SetSingleShape(n_idx, cols, d_idx);
  mm.SetTensorA(qi_rows);
  mm.SetTensorB(ki_rows, true);
  mm.IterateAll(ws_sx);
  Duplicate(score, 0.0f, cols);
  for (uint32_t g = 0; g < n_idx; ++g) {
    LoadRowsF32(sx, ws_sx[uint64_t{g} * cols], 1, cols);
    ReluKeepNan(tmp, sx, cols);
    Muls(tmp, tmp, w.GetValue(g), cols);
    Add(score, score, tmp, cols);
    SyncPipes<HardEvent::V_MTE2>();  // the next head's row overwrites sx
  }
}

// The main attention's head probabilities summed into the teacher: p += P_h over n columns for
// head rows [h0, h0 + rows) of an S tile (row pitch `pitch`), P_h = exp(scale S - max_h) / sum_h
// with the head statistics `max`/`sum` (scalar-readable). `e`: [n] scratch. Shared by the sparse
// and the dense KL-loss kernels.
__aicore__ inline void AddHeadProbs(const LocalTensor<float>& p, const LocalTensor<float>& s, uint32_t pitch,
                                    uint32_t h0, uint32_t rows, uint32_t n, float scale,
                                    const LocalTensor<float>& max, const LocalTensor<float>& sum,
                                    const LocalTensor<float>& e) {
  for (uint32_t i = 0; i < rows; ++i) {
    Muls(e, s[i * pitch], scale, n);
    Adds(e, e, -max.GetValue(h0 + i), n);
    Exp(e, e, n);
    Muls(e, e, 1.0f / sum.GetValue(h0 + i), n);
    Add(p, p, e, n);
  }
}

}  // namespace mgo::kernel
