// The index-score backward shared by SparseLightningIndexerGradKLLoss and LightningIndexerGrad
// (mixed kernels: the AIV code calls the high-level Matmul objects, the AIC of its core serves
// them). Given dI (the gradient of the index score I[t, j] = sum_g w[t,g] relu(Sx[g, j]),
// Sx = q_index[t] . key_index[j]) per (token, slot):
//   row pass, per query token t (its visible selected keys j in slot order, n <= K):
//     Sx = q_index[t] Kiᵀ [nIdx, n] (AIC), d_weights[t, g] = sum_j dI_j relu(Sx[g, j]) and
//     dS[g, j] = dI_j w_g [Sx[g, j] > 0] (AIV, 16-bit), d_query_index[t] = dS Ki (AIC);
//   key pass, per key block of keyBlock key tokens (global order): the owning AIV collects the
//     (token, slot) pairs selecting its keys in ascending order, recomputes their Sx against the
//     block (AIC), builds Coef = dI w [Sx > 0] on each pair's key column (AIV) and accumulates
//     d_key_index rows += Coefᵀ Qi (AIC) in its own float32 block accumulator. Every sum is formed
//     by one core in an order the shape fixes: the bits do not depend on the core count or on the
//     order cores run in.
// relu and [Sx > 0] keep NaN as the float64 references do (ReluKeepNan, ReluStep).
// `Tiling` is either op's tiling data (the fields of indexer_grad_tiling_common.h, plus t1, t2,
// k, gatherRows). Include after "kernel_operator.h" and "lib/matmul_intf.h".
#pragma once

#include <cstdint>
#include <type_traits>

#include "indexer_grad_tiling_common.h"
#include "indexer_kernel_common.h"

namespace mgo::kernel {

// The UB the core works on: float32 [kPad] vectors sx (only ever a copy-in target), tmp, di (dI
// by visible column), float32 [AlignUp(max(nIdx, mKey), 8)] head vectors w, dw; ds16 [kPad]
// 16-bit; tile >= [mKey, keyBlock] float32, tile16 that 16-bit; rowF/rowH one dIdx row; wRaw one
// weights row as stored; gather [gatherRows, >= dIdx] 16-bit; red/work the reduce result, scratch.
template <typename T, typename W>
struct IndexerGradUb {
  LocalTensor<float> sx, tmp, di, w, dw, tile, rowF, red, work;
  LocalTensor<T> ds16, tile16, rowH, gather;
  LocalTensor<W> wRaw;
};

// The buffers of an IndexerGradUbPlan, allocated exactly as the plan counts them.
template <typename Plan>
struct IndexerGradUbBufs {
  TBuf<TPosition::VECCALC> gather, tile, tile16, vec[Plan::kVecs], vec16, head[Plan::kHeads], wRaw, rowF, rowH,
      work, red;

  __aicore__ inline void Init(TPipe& pipe, const Plan& p) {
    pipe.InitBuffer(gather, p.gatherBytes);
    pipe.InitBuffer(tile, p.tileBytes);
    pipe.InitBuffer(tile16, p.tile16Bytes);
    for (auto& v : vec) pipe.InitBuffer(v, p.vecBytes);
    pipe.InitBuffer(vec16, p.vec16Bytes);
    for (auto& h : head) pipe.InitBuffer(h, p.headBytes);
    pipe.InitBuffer(wRaw, p.wBytes);
    pipe.InitBuffer(rowF, p.rowFBytes);
    pipe.InitBuffer(rowH, p.rowHBytes);
    pipe.InitBuffer(work, p.workBytes);
    pipe.InitBuffer(red, Plan::kRedBytes);
  }

  // Not const: TBuf::Get is a non-const member in the real API (kernel_tpipe.h).
  __aicore__ inline LocalTensor<float> Vec(uint32_t i) { return vec[i].template Get<float>(); }
  __aicore__ inline LocalTensor<float> Head(uint32_t i) { return head[i].template Get<float>(); }

  // The core's view, with the vectors and head vectors it uses named by index.
  template <typename T, typename W>
  __aicore__ inline IndexerGradUb<T, W> View(uint32_t sx, uint32_t tmp, uint32_t di, uint32_t w, uint32_t dw) {
    return IndexerGradUb<T, W>{Vec(sx), Vec(tmp), Vec(di), Head(w), Head(dw), tile.template Get<float>(),
                               rowF.template Get<float>(), red.template Get<float>(), work.template Get<float>(),
                               vec16.template Get<T>(), tile16.template Get<T>(), rowH.template Get<T>(),
                               gather.template Get<T>(), wRaw.template Get<W>()};
  }
};

// T: query_index/key_index dtype (half or bfloat16_t); W: weights and d_weights (T or float).
template <typename T, typename W, typename Tiling>
class IndexerGradCore {
 public:
  using A = MatmulType<TPosition::GM, CubeFormat::ND, T>;
  using AT = MatmulType<TPosition::GM, CubeFormat::ND, T, true>;
  using C = MatmulType<TPosition::GM, CubeFormat::ND, float>;
  using MmNT = Matmul<A, AT, C>;  // Sx = Qi Kᵀ
  using MmNN = Matmul<A, A, C>;   // d_query_index = dS Ki
  using MmTN = Matmul<AT, A, C>;  // d_key_index block += Coefᵀ Qi
  static constexpr uint32_t kMaxPairs = mgo::tiling::kIndexerPairRows;

  // The op's tensors this part reads and writes. dI: float32 [t1, k] by slot (read for visible
  // slots only).
  struct Io {
    // One per line: GM_ADDR is the macro `__gm__ uint8_t*`, so `GM_ADDR a, b;` makes only a a pointer.
    GM_ADDR query_index;
    GM_ADDR key_index;
    GM_ADDR weights;
    GM_ADDR indices;
    GM_ADDR d_query_index;
    GM_ADDR d_key_index;
    GM_ADDR d_weights;
    GlobalTensor<float> dI;
  };
  using Ub = IndexerGradUb<T, W>;

  // aiv_ws: this AIV's workspace region (offsets t.wsKi ... t.wsDkb).
  __aicore__ inline void Init(const Tiling& t, const Io& io, GM_ADDR aiv_ws, const Ub& ub, const SfaGeometry* geo,
                              MmNT* nt, MmNN* nn, MmTN* tn) {
    t_ = t;
    ub_ = ub;
    geo_ = geo;
    mmNT_ = nt;
    mmNN_ = nn;
    mmTN_ = tn;
    gather_.Init(ub.gather, t.gatherRows);
    const uint64_t qi_elems = uint64_t{t.t1} * t.nIdx * t.dIdx;
    qiGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.query_index), qi_elems);
    kiGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.key_index), uint64_t{t.t2} * t.dIdx);
    wGm_.SetGlobalBuffer(reinterpret_cast<__gm__ W*>(io.weights), uint64_t{t.t1} * t.nIdx);
    idxGm_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(io.indices), uint64_t{t.t1} * t.k);
    dqiGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.d_query_index), qi_elems);
    dkiGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.d_key_index), uint64_t{t.t2} * t.dIdx);
    dwGm_.SetGlobalBuffer(reinterpret_cast<__gm__ W*>(io.d_weights), uint64_t{t.t1} * t.nIdx);
    diGm_ = io.dI;
    wsKi_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(aiv_ws + t.wsKi), uint64_t{t.kPad} * t.dIdx);
    wsSx_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(aiv_ws + t.wsSx), uint64_t{t.nIdx} * t.kPad);
    wsDs_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(aiv_ws + t.wsDs), uint64_t{t.nIdx} * t.kPad);
    wsDq_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(aiv_ws + t.wsDq), uint64_t{t.nIdx} * t.dIdx);
    wsQi_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(aiv_ws + t.wsQi), uint64_t{t.mKey} * t.dIdx);
    wsKb_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(aiv_ws + t.wsKb), uint64_t{t.keyBlock} * t.dIdx);
    wsSxk_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(aiv_ws + t.wsSxk), uint64_t{t.mKey} * t.keyBlock);
    wsCoef_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(aiv_ws + t.wsCoef), uint64_t{t.mKey} * t.keyBlock);
    wsDkb_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(aiv_ws + t.wsDkb), uint64_t{t.keyBlock} * t.dIdx);
  }

  __aicore__ inline RowGather<T>& Gather() { return gather_; }
  __aicore__ inline const GlobalTensor<int32_t>& Indices() const { return idxGm_; }

  // Weights row of token t -> float32 dst (readable by V and the scalar unit).
  __aicore__ inline void LoadWeights(uint64_t t, const LocalTensor<float>& dst) {
    LoadWeightsF32(ub_.wRaw, wGm_[t * t_.nIdx], dst, t_.nIdx);
  }

  // ---------------------------------------------------------------- row pass
  // Walks the visible selected keys of token t (geometry r) in slot order, gathering their
  // key_index rows into the Ki workspace, and calls on_key(slot, key_token, column) for each.
  // Returns the number of columns n.
  template <typename OnKey>
  __aicore__ inline uint32_t GatherKeyIndexRows(uint32_t t, const SfaRow& r, OnKey&& on_key) {
    uint32_t n = 0;
    const uint64_t slots = uint64_t{t} * t_.k;
    for (uint32_t slot = 0; slot < t_.k; ++slot) {
      uint32_t key = 0;
      uint32_t end = 0;
      if (!geo_->BlockKeys(idxGm_.GetValue(slots + slot), r, &key, &end)) continue;
      const uint64_t k_row = r.kv0 + key;
      on_key(slot, k_row, n);
      gather_.Copy(wsKi_[uint64_t{n} * t_.dIdx], kiGm_[k_row * t_.dIdx], kiGm_, t_.dIdx, 1, t_.dIdx, 0);
      ++n;
    }
    return n;
  }

  // Sx = q_index[t] Kiᵀ [nIdx, n] into the Sx workspace (n >= 1 gathered columns).
  __aicore__ inline void Scores(uint32_t t, uint32_t n) {
    mmNT_->SetOrgShape(t_.nIdx, n, t_.dIdx, t_.dIdx);
    mmNT_->SetSingleShape(t_.nIdx, n, t_.dIdx);
    mmNT_->SetTensorA(qiGm_[uint64_t{t} * t_.nIdx * t_.dIdx]);
    mmNT_->SetTensorB(wsKi_, true);
    mmNT_->IterateAll(wsSx_);
  }

  // Sx row g of the current token -> ub.sx (ready for V and the scalar unit).
  __aicore__ inline void LoadScoreRow(uint32_t g, uint32_t n) { LoadRowsF32(ub_.sx, wsSx_[uint64_t{g} * n], 1, n); }

  // From Sx (Scores), dI by column (ub.di, ready for V) and the token's weights (ub.w, float32):
  // d_weights row t, dS, and d_query_index rows of t = dS Ki.
  __aicore__ inline void RowGrads(uint32_t t, uint32_t n) {
    const LocalTensor<float> sx = ub_.sx;
    const LocalTensor<float> tmp = ub_.tmp;
    for (uint32_t g = 0; g < t_.nIdx; ++g) {
      LoadScoreRow(g, n);
      ReluKeepNan(tmp, sx, n);
      Mul(tmp, tmp, ub_.di, n);
      ReduceSum(ub_.red, tmp, ub_.work, n);
      const float w = ub_.w.GetValue(g);
      Muls(tmp, ub_.di, w, n);
      SyncPipes<HardEvent::V_S>();
      ub_.dw.SetValue(g, ub_.red.GetValue(0));
      for (uint32_t j = 0; j < n; ++j) tmp.SetValue(j, tmp.GetValue(j) * ReluStep(sx.GetValue(j)));
      SyncPipes<HardEvent::S_V>();
      Cast(ub_.ds16, tmp, RoundMode::CAST_RINT, n);
      StoreRows16(wsDs_[uint64_t{g} * n], ub_.ds16, 1, n);
      SyncPipes<HardEvent::V_MTE2>();
    }
    WriteWeightsGrad(t);
    mmNN_->SetOrgShape(t_.nIdx, t_.dIdx, n, n);
    mmNN_->SetSingleShape(t_.nIdx, t_.dIdx, n);
    mmNN_->SetTensorA(wsDs_);
    mmNN_->SetTensorB(wsKi_);
    mmNN_->IterateAll(wsDq_);
    WriteRows(wsDq_, true, t_.nIdx, uint64_t{t} * t_.nIdx, dqiGm_);
  }

  // A token without a visible key: zero d_weights and d_query_index rows.
  __aicore__ inline void EmptyRow(uint32_t t) {
    Duplicate(ub_.dw, 0.0f, t_.nIdx);
    SyncPipes<HardEvent::V_S>();
    WriteWeightsGrad(t);
    WriteRows(wsDq_, false, t_.nIdx, uint64_t{t} * t_.nIdx, dqiGm_);
  }

  // ---------------------------------------------------------------- key pass
  // Key block u: global key tokens [u * keyBlock, ...), possibly spanning batches.
  __aicore__ inline void KeyBlock(uint32_t u) {
    const uint64_t g0 = uint64_t{u} * t_.keyBlock;
    const uint32_t nb = static_cast<uint32_t>(t_.t2 - g0 < t_.keyBlock ? t_.t2 - g0 : t_.keyBlock);
    gather_.Copy(wsKb_, kiGm_[g0 * t_.dIdx], kiGm_, t_.dIdx, nb, t_.dIdx, 0);
    uint32_t count = 0;
    uint32_t chunks = 0;
    const uint32_t b_first = geo_->BatchOf(g0, true);
    const uint32_t b_last = geo_->BatchOf(g0 + nb - 1, true);
    for (uint32_t b = b_first; b <= b_last; ++b) {
      uint64_t q0 = 0;
      uint64_t kv0 = 0;
      uint32_t s1_len = 0;
      uint32_t s2_len = 0;
      geo_->Batch(b, &q0, &s1_len, &kv0, &s2_len);
      for (uint32_t s1 = 0; s1 < s1_len; ++s1) {
        const int64_t limit = geo_->LimitOf(b, s1, s1_len, s2_len);
        const uint64_t slots = (q0 + s1) * t_.k;
        for (uint32_t slot = 0; slot < t_.k; ++slot) {
          const int32_t idx = idxGm_.GetValue(slots + slot);
          if (idx < 0 || static_cast<uint32_t>(idx) >= s2_len || idx > limit) continue;
          const uint64_t key = kv0 + static_cast<uint64_t>(idx);
          if (key < g0 || key >= g0 + nb) continue;
          pairT_[count] = static_cast<uint32_t>(q0 + s1);
          pairCol_[count] = static_cast<uint32_t>(key - g0);
          pairDi_[count] = diGm_.GetValue(slots + slot);
          if (++count == t_.rowChunk) {
            KeyChunk(count, nb, chunks++);
            count = 0;
          }
        }
      }
    }
    if (count > 0) KeyChunk(count, nb, chunks++);
    WriteRows(wsDkb_, chunks > 0, nb, g0, dkiGm_);
  }

 private:
  // d_weights row t from ub.dw (scalar-written), in W.
  __aicore__ inline void WriteWeightsGrad(uint32_t t) {
    SyncPipes<HardEvent::S_V>();
    SyncPipes<HardEvent::S_MTE3>();
    const DataCopyExtParams one{1, static_cast<uint32_t>(t_.nIdx * sizeof(W)), 0, 0, 0};
    if constexpr (std::is_same_v<W, float>) {
      SyncPipes<HardEvent::V_MTE3>();
      DataCopyPad(dwGm_[uint64_t{t} * t_.nIdx], ub_.dw, one);
    } else {
      Cast(ub_.wRaw, ub_.dw, RoundMode::CAST_RINT, t_.nIdx);
      SyncPipes<HardEvent::V_MTE3>();
      DataCopyPad(dwGm_[uint64_t{t} * t_.nIdx], ub_.wRaw, one);
    }
    SyncPipes<HardEvent::MTE3_V>();
    SyncPipes<HardEvent::MTE3_MTE2>();
  }

  // Output rows row0 + i (i < rows, dIdx wide) = acc row i cast to T; zeros when !any.
  __aicore__ inline void WriteRows(const GlobalTensor<float>& acc, bool any, uint32_t rows, uint64_t row0,
                                   const GlobalTensor<T>& out) {
    if (!any) Duplicate(ub_.rowF, 0.0f, t_.dIdx);
    for (uint32_t i = 0; i < rows; ++i) {
      if (any) {
        DataCopy(ub_.rowF, acc[uint64_t{i} * t_.dIdx], t_.dIdx);
        SyncPipes<HardEvent::MTE2_V>();
      }
      Cast(ub_.rowH, ub_.rowF, RoundMode::CAST_RINT, t_.dIdx);
      SyncPipes<HardEvent::V_MTE3>();
      DataCopy(out[(row0 + i) * t_.dIdx], ub_.rowH, t_.dIdx);
      SyncPipes<HardEvent::MTE3_V>();
      SyncPipes<HardEvent::MTE3_MTE2>();
    }
  }

  // d_key_index block (+)= Coefᵀ Qi over `count` pairs: Sx of their query_index rows against the
  // block (AIC), Coef[(i, g), col_i] = dI_i w[t_i, g] [Sx > 0] and 0 elsewhere (AIV).
  __aicore__ inline void KeyChunk(uint32_t count, uint32_t nb, uint32_t index) {
    const uint32_t m = count * t_.nIdx;
    const LocalTensor<float> coef = ub_.w;  // [m] coefficients dI_i * w[t_i, g] (mKey <= head size)
    for (uint32_t i = 0; i < count; ++i) {
      const uint64_t qi_row = uint64_t{pairT_[i]} * t_.nIdx;
      gather_.Copy(wsQi_[uint64_t{i} * t_.nIdx * t_.dIdx], qiGm_[qi_row * t_.dIdx], qiGm_, t_.dIdx, t_.nIdx, t_.dIdx,
                   0);
      LoadWeights(pairT_[i], ub_.dw);
      for (uint32_t g = 0; g < t_.nIdx; ++g) coef.SetValue(i * t_.nIdx + g, pairDi_[i] * ub_.dw.GetValue(g));
    }
    mmNT_->SetOrgShape(m, nb, t_.dIdx, t_.dIdx);
    mmNT_->SetSingleShape(m, nb, t_.dIdx);
    mmNT_->SetTensorA(wsQi_);
    mmNT_->SetTensorB(wsKb_, true);
    mmNT_->IterateAll(wsSxk_);
    const LocalTensor<float> sxk = ub_.tile;
    LoadRowsF32(sxk, wsSxk_, m, nb);
    SyncPipes<HardEvent::MTE2_S>();
    const uint32_t pitch = static_cast<uint32_t>(mgo::tiling::AlignUp(nb, 8));
    bool nan_rows[kMaxPairs] = {};
    for (uint32_t row = 0; row < m; ++row) {
      const uint32_t i = row / t_.nIdx;
      const float s = sxk.GetValue(row * pitch + pairCol_[i]);
      nan_rows[i] = nan_rows[i] || s != s;
      coef.SetValue(row, coef.GetValue(row) * ReluStep(s));
    }
    for (uint32_t i = 0; i < count; ++i) {
      if (nan_rows[i]) CopyQiRowsNanAsZero(uint64_t{pairT_[i]} * t_.nIdx, i);
    }
    // Coefficient rows of keyBlock (= 16) columns: one 32-byte row of 16-bit values each.
    const uint32_t kb = t_.keyBlock;
    SyncPipes<HardEvent::S_V>();
    Duplicate(sxk, 0.0f, m * kb);
    SyncPipes<HardEvent::V_S>();
    for (uint32_t row = 0; row < m; ++row) sxk.SetValue(row * kb + pairCol_[row / t_.nIdx], coef.GetValue(row));
    SyncPipes<HardEvent::S_V>();
    Cast(ub_.tile16, sxk, RoundMode::CAST_RINT, m * kb);
    StoreRows16(wsCoef_, ub_.tile16, m, nb);
    SyncPipes<HardEvent::V_MTE2>();
    mmTN_->SetOrgShape(nb, t_.dIdx, m, m);
    mmTN_->SetSingleShape(nb, t_.dIdx, m);
    mmTN_->SetTensorA(wsCoef_, true);
    mmTN_->SetTensorB(wsQi_);
    mmTN_->IterateAll(wsDkb_, index > 0 ? 1 : 0);
  }

  // query_index rows qi_row.. of pair i -> wsQi_ with NaN read as 0. Coefᵀ Qi multiplies the pair's
  // rows by the zero coefficients of the block's other keys too, and 0 * NaN = NaN would reach keys
  // the token never selected. A NaN in query_index row (t, g) makes Sx[(i, g), col_i] NaN, so the
  // pair's own key still gets NaN * 0 = NaN in every element, as in the references. Only pairs
  // with a NaN score at their own column come here (a NaN-free row is copied unchanged anyway).
  __aicore__ inline void CopyQiRowsNanAsZero(uint64_t qi_row, uint32_t i) {
    const LocalTensor<T> buf = ub_.gather;
    for (uint32_t done = 0; done < t_.nIdx; done += t_.gatherRows) {
      const uint32_t elems = (t_.nIdx - done < t_.gatherRows ? t_.nIdx - done : t_.gatherRows) * t_.dIdx;
      DataCopy(buf, qiGm_[(qi_row + done) * t_.dIdx], elems);
      SyncPipes<HardEvent::MTE2_S>();
      for (uint32_t e = 0; e < elems; ++e) {
        const float x = static_cast<float>(buf.GetValue(e));
        if (x != x) buf.SetValue(e, T(0.0f));
      }
      SyncPipes<HardEvent::S_MTE3>();
      SyncPipes<HardEvent::MTE2_MTE3>();
      DataCopy(wsQi_[(uint64_t{i} * t_.nIdx + done) * t_.dIdx], buf, elems);
      SyncPipes<HardEvent::MTE3_MTE2>();
    }
  }

  Tiling t_{};
  Ub ub_{};
  const SfaGeometry* geo_ = nullptr;
  MmNT* mmNT_ = nullptr;
  MmNN* mmNN_ = nullptr;
  MmTN* mmTN_ = nullptr;
  RowGather<T> gather_;
  uint32_t pairT_[kMaxPairs] = {};
  uint32_t pairCol_[kMaxPairs] = {};
  float pairDi_[kMaxPairs] = {};
  GlobalTensor<T> qiGm_, kiGm_, dqiGm_, dkiGm_;
  GlobalTensor<W> wGm_, dwGm_;
  GlobalTensor<int32_t> idxGm_;
  GlobalTensor<float> diGm_;
  GlobalTensor<T> wsKi_, wsDs_, wsQi_, wsKb_, wsCoef_;
  GlobalTensor<float> wsSx_, wsDq_, wsSxk_, wsDkb_;
};

}  // namespace mgo::kernel
