// The online softmax of the sparse attention forwards (SparseFlashAttention, SparseFlashMla), one query row group
// at a time: the G heads of the group start from their sinks (or from nothing), every chunk of gathered keys updates
// the running max m and sum l and the accumulator acc = sum P V, and the output rows are acc / l. The kernels keep
// their own row walk, key gathering and statistics outputs. Include after "kernel_operator.h" and
// "lib/matmul_intf.h".
#pragma once

#include <cstdint>

#include "sfa_kernel_common.h"

namespace mgo::kernel {

// The per-AIV workspace one group's chunks go through (GM).
template <typename T>
struct SfaChunkWs {
  GlobalTensor<T> q;         // [G, dk] the query rows of the group
  GlobalTensor<T> k;         // [n, dk] the chunk's keys
  GlobalTensor<T> v;         // [n, d] the chunk's values (may be k itself: shared KV)
  GlobalTensor<T> p;         // [G, n] the chunk's probabilities in T
  GlobalTensor<float> s;     // [G, n] the chunk's scores
  GlobalTensor<float> acc;   // [G, d] sum of P V over the chunks so far
};

// The sizes of one group: G heads, score width dk, value width d, UB tile rows of the scores, softmax scale.
struct SfaSoftmaxDims {
  uint32_t g;
  uint32_t dk;
  uint32_t d;
  uint32_t ubTileRows;
  float scale;
};

template <typename T>
class SfaOnlineSoftmax {
  using A = MatmulType<TPosition::GM, CubeFormat::ND, T>;
  using BT = MatmulType<TPosition::GM, CubeFormat::ND, T, true>;
  using C = MatmulType<TPosition::GM, CubeFormat::ND, float>;

 public:
  // The chunk's two products on the AIC (float32 accumulation): S = Q Kᵀ and acc (+)= P V. Public because the
  // kernel's Run registers them: REGIST_MATMUL_OBJ declares the clients in its caller's scope, so it stays there.
  Matmul<A, BT, C> mmScore;
  Matmul<A, A, C> mmPv;

  enum StatSlot : uint32_t { kMax = 0, kSum = 1, kNewMax = 2, kRowSum = 3, kAlpha = 4 };

  // `ub` outlives this object (a member of the same kernel).
  __aicore__ inline void Init(SfaUb* ub, const SfaChunkWs<T>& ws, const SfaSoftmaxDims& dims) {
    ub_ = ub;
    ws_ = ws;
    dims_ = dims;
  }

  // Not const: TBuf::Get is a non-const member in the real API (kernel_tpipe.h).
  __aicore__ inline LocalTensor<float> Stat(StatSlot s) { return ub_->stat[s].template Get<float>(); }

  // m = lowest, l = 0 for every head of the group: the start without sinks.
  __aicore__ inline void Start() {
    Duplicate(Stat(kMax), kLowestFloat, dims_.g);
    Duplicate(Stat(kSum), 0.0f, dims_.g);
  }

  // The sink of each head of the group (from head0) as the first term of its softmax: m = sink,
  // l = exp(sink - sink) = 1. A -inf sink keeps the start without sink.
  __aicore__ inline void StartWithSinks(const GlobalTensor<float>& sinks, uint32_t head0) {
    SyncPipes<HardEvent::V_S>();
    for (uint32_t h = 0; h < dims_.g; ++h) {
      const float sink = sinks.GetValue(head0 + h);
      if (sink < kLowestFloat) continue;  // -inf
      Stat(kMax).SetValue(h, sink);
      Stat(kSum).SetValue(h, 1.0f);
    }
    SyncPipes<HardEvent::S_V>();
  }

  // One chunk of n gathered keys (chunk `index` of the group): S = Q Kᵀ (AIC) -> scale, running max m,
  // P = exp(S - m), running sum l (AIV); acc = acc * exp(m_old - m) (AIV), acc (+)= P V (AIC).
  __aicore__ inline void Chunk(uint32_t n, uint32_t index) {
    const uint32_t g = dims_.g;
    mmScore.SetOrgShape(g, n, dims_.dk, dims_.dk);
    mmScore.SetSingleShape(g, n, dims_.dk);
    mmScore.SetTensorA(ws_.q);
    mmScore.SetTensorB(ws_.k, true);
    mmScore.IterateAll(ws_.s);

    const LocalTensor<float> score = ub_->score.template Get<float>();
    const LocalTensor<T> p16 = ub_->io[0].template Get<T>();
    const uint32_t pitch_f = static_cast<uint32_t>(mgo::tiling::AlignUp(n, 8));
    const uint32_t pitch_h = static_cast<uint32_t>(mgo::tiling::AlignUp(n, 16));
    for (uint32_t h0 = 0; h0 < g; h0 += dims_.ubTileRows) {
      const uint32_t rows = g - h0 < dims_.ubTileRows ? g - h0 : dims_.ubTileRows;
      LoadRowsF32(score, ws_.s[uint64_t{h0} * n], rows, n);
      for (uint32_t i = 0; i < rows; ++i) ScoreRow(score[i * pitch_f], p16[i * pitch_h], h0 + i, n);
      StoreRows16(ws_.p[uint64_t{h0} * n], p16, rows, n);
    }
    SyncPipes<HardEvent::S_V>();
    // alpha = exp(m_old - m_new) rescales what earlier chunks (and the sink) accumulated.
    Sub(Stat(kAlpha), Stat(kMax), Stat(kNewMax), g);
    Exp(Stat(kAlpha), Stat(kAlpha), g);
    Mul(Stat(kSum), Stat(kSum), Stat(kAlpha), g);
    Add(Stat(kSum), Stat(kSum), Stat(kRowSum), g);
    Muls(Stat(kMax), Stat(kNewMax), 1.0f, g);
    if (index > 0) RescaleAcc();

    mmPv.SetOrgShape(g, dims_.d, n, n);
    mmPv.SetSingleShape(g, dims_.d, n);
    mmPv.SetTensorA(ws_.p);
    mmPv.SetTensorB(ws_.v);
    mmPv.IterateAll(ws_.acc, index > 0 ? 1 : 0);
  }

  // After the last row: ends both Matmul clients (the AIC's service loop stops).
  __aicore__ inline void End() {
    mmScore.End();
    mmPv.End();
  }

  // Output rows from out_row0 (GM pitch d): acc / l per head, or 0 when the group had no chunk.
  __aicore__ inline void WriteOut(const GlobalTensor<T>& out, uint64_t out_row0, bool any) {
    const uint32_t d = dims_.d;
    const LocalTensor<float> rowf = ub_->rowF[0].template Get<float>();
    const LocalTensor<T> rowh = ub_->rowH[0].template Get<T>();
    if (!any) Duplicate(rowf, 0.0f, d);
    SyncPipes<HardEvent::V_S>();  // the sums are read by the scalar unit
    for (uint32_t h = 0; h < dims_.g; ++h) {
      if (any) {
        const float inv = 1.0f / Stat(kSum).GetValue(h);
        DataCopy(rowf, ws_.acc[uint64_t{h} * d], d);
        SyncPipes<HardEvent::MTE2_V>();
        Muls(rowf, rowf, inv, d);
      }
      Cast(rowh, rowf, RoundMode::CAST_RINT, d);
      SyncPipes<HardEvent::V_MTE3>();
      DataCopy(out[(out_row0 + h) * d], rowh, d);
      SyncPipes<HardEvent::MTE3_V>();
      SyncPipes<HardEvent::MTE3_MTE2>();
    }
  }

 private:
  // Head `head`'s scores s (n float32 in UB): scaled in place, then P = exp(s - m_new) into p as T; its new max
  // and row sum into the statistics.
  __aicore__ inline void ScoreRow(const LocalTensor<float>& s, const LocalTensor<T>& p, uint32_t head, uint32_t n) {
    const LocalTensor<float> red = ub_->red.template Get<float>();
    const LocalTensor<float> work = ub_->work.template Get<float>();
    Muls(s, s, dims_.scale, n);
    ReduceMax(red, s, work, n);
    SyncPipes<HardEvent::V_S>();
    const float old_max = Stat(kMax).GetValue(head);
    const float chunk_max = red.GetValue(0);
    const float new_max = chunk_max > old_max ? chunk_max : old_max;
    Stat(kNewMax).SetValue(head, new_max);
    SyncPipes<HardEvent::S_V>();
    Adds(s, s, -new_max, n);
    Exp(s, s, n);
    ReduceSum(red, s, work, n);
    Cast(p, s, RoundMode::CAST_RINT, n);
    SyncPipes<HardEvent::V_S>();
    const float row_sum = red.GetValue(0);
    Stat(kRowSum).SetValue(head, row_sum);
    // A NaN score makes the row sum NaN; the max must be NaN too (IEEE propagation, as the reference's),
    // whatever ReduceMax does with NaN. (+inf - +inf is NaN too: keep +inf.)
    if (row_sum != row_sum && !(new_max > 3.0e38f)) Stat(kNewMax).SetValue(head, row_sum);
  }

  // acc[h] *= alpha[h], row by row through UB.
  __aicore__ inline void RescaleAcc() {
    const uint32_t d = dims_.d;
    const LocalTensor<float> rowf = ub_->rowF[0].template Get<float>();
    SyncPipes<HardEvent::V_S>();
    for (uint32_t h = 0; h < dims_.g; ++h) {
      const float alpha = Stat(kAlpha).GetValue(h);
      DataCopy(rowf, ws_.acc[uint64_t{h} * d], d);
      SyncPipes<HardEvent::MTE2_V>();
      Muls(rowf, rowf, alpha, d);
      SyncPipes<HardEvent::V_MTE3>();
      DataCopy(ws_.acc[uint64_t{h} * d], rowf, d);
      SyncPipes<HardEvent::MTE3_MTE2>();
    }
  }

  SfaUb* ub_ = nullptr;
  SfaChunkWs<T> ws_;
  SfaSoftmaxDims dims_{};
};

}  // namespace mgo::kernel
