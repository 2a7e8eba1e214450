// SparseLightningIndexerGradKLLoss as a mixed kernel: the AIVs gather and do the element-wise
// work, the AIC of each core multiplies (high-level Matmul, float32 accumulation). SPEC 4.
//
// Row pass (query tokens t, tiling.rowStart): the visible selected keys j of t (slot order) are
// gathered: cat(key, key_rope) rows in chunks of keyChunk for S = cat(q, q_rope) Kfᵀ (AIC) and
// the teacher p_j = (1/N1) sum_h exp(scale S[h, j] - max_h) / sum_h (AIV, not renormalised);
// key_index rows all at once for Sx = q_index Kiᵀ (AIC). Then (AIV) I = sum_g w_g relu(Sx[g]),
// y = softmax(I), the token's loss sum_j p (ln max(p, 1e-8) - ln max(y, 1e-8)) -> workspace,
// dI = y - p -> workspace (by slot), d_weights[g] = sum_j dI relu(Sx[g]) and
// dS = dI w [Sx > 0] (16-bit); d_query_index = dS Ki (AIC). relu and [Sx > 0] keep NaN as the
// reference does (ReluKeepNan, ReluStep): a NaN score makes its token's outputs NaN.
// Key pass (after SyncAll, tiling.keyBlockStart): the AIV owning a key block collects the
// (query token, slot) pairs selecting its keys in ascending order, recomputes Sx of their
// query_index rows against the block (AIC), builds Coef = dI w [Sx > 0] on each pair's key
// column (AIV) and accumulates d_key_index rows += Coefᵀ Qi (AIC) into its own accumulator.
// Every d_key_index sum is formed by one core in an order fixed by the shape: the bits do not
// depend on the core count or on the order cores run in (deterministic in every mode, which
// honours deterministic = true). AIV 0 then sums the per-token losses in token order into loss.
#include <type_traits>

#include "kernel_operator.h"
#include "lib/matmul_intf.h"

#include "../../common/indexer_kernel_common.h"
#include "../sparse_lightning_indexer_grad_kl_loss_tiling.h"

namespace mgo::kernel {

using mgo::tiling::SliTilingData;

struct SliGradIo {
  GM_ADDR query, key, query_index, key_index, weights, indices, softmax_max, softmax_sum, query_rope, key_rope,
      lens_q, lens_k;
  GM_ADDR d_query_index, d_key_index, d_weights, loss, workspace;
};

inline constexpr float kLogFloor = 1e-8f;

// T: query/key/index dtype (half or bfloat16_t); W: weights and d_weights (T or float).
template <typename T, typename W>
class SparseLightningIndexerGradKernel {
  using A = MatmulType<TPosition::GM, CubeFormat::ND, T>;
  using AT = MatmulType<TPosition::GM, CubeFormat::ND, T, true>;
  using C = MatmulType<TPosition::GM, CubeFormat::ND, float>;
  static constexpr bool kWeightsF32 = std::is_same_v<W, float>;
  static constexpr uint32_t kMaxPairs = 128;

 public:
  __aicore__ inline void Run(const SliGradIo& io, const SliTilingData& t) {
    t_ = t;
    const TCubeTiling nt = ToCubeTiling(t.mmNT);
    const TCubeTiling nn = ToCubeTiling(t.mmNN);
    const TCubeTiling tn = ToCubeTiling(t.mmTN);
    REGIST_MATMUL_OBJ(&pipe_, GetSysWorkSpacePtr(), mmNT_, &nt, mmNN_, &nn, mmTN_, &tn);
    if ASCEND_IS_AIC {
      return;
    }
    InitGm(io);
    geo_.Init(IndexerGeometry(t.layout, t.sparseMode, t.batch, t.s1, t.s2, t.t1, t.t2, t.n1), io.lens_q, io.lens_k);
    InitUb();
    const auto aiv = static_cast<uint32_t>(GetBlockIdx());
    for (uint32_t row = t.rowStart[aiv]; row < t.rowStart[aiv + 1]; ++row) QueryRow(row);
    SyncAll();  // every dI and per-token loss is in the workspace
    for (uint32_t u = t.keyBlockStart[aiv]; u < t.keyBlockStart[aiv + 1]; ++u) KeyBlock(u);
    if (aiv == 0) Loss();
    mmNT_.End();
    mmNN_.End();
    mmTN_.End();
  }

 private:
  __aicore__ inline void InitGm(const SliGradIo& io) {
    const uint64_t q_rows = uint64_t{t_.t1} * t_.n1;
    qGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.query), q_rows * t_.d);
    kGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.key), uint64_t{t_.t2} * t_.d);
    qiGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.query_index), uint64_t{t_.t1} * t_.nIdx * t_.dIdx);
    kiGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.key_index), uint64_t{t_.t2} * t_.dIdx);
    wGm_.SetGlobalBuffer(reinterpret_cast<__gm__ W*>(io.weights), uint64_t{t_.t1} * t_.nIdx);
    idxGm_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(io.indices), uint64_t{t_.t1} * t_.k);
    maxGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.softmax_max), q_rows);
    sumGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.softmax_sum), q_rows);
    if (t_.hasRope) {
      qrGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.query_rope), q_rows * t_.dr);
      krGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.key_rope), uint64_t{t_.t2} * t_.dr);
    }
    dqiGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.d_query_index), uint64_t{t_.t1} * t_.nIdx * t_.dIdx);
    dkiGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.d_key_index), uint64_t{t_.t2} * t_.dIdx);
    dwGm_.SetGlobalBuffer(reinterpret_cast<__gm__ W*>(io.d_weights), uint64_t{t_.t1} * t_.nIdx);
    lossGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.loss), 1);
    GM_ADDR user = GetUserWorkspace(io.workspace);
    GM_ADDR ws = user + static_cast<uint64_t>(GetBlockIdx()) * t_.aivWsBytes;
    wsQf_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsQf), uint64_t{t_.n1} * t_.dk);
    wsKf_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsKf), uint64_t{t_.keyChunk} * t_.dk);
    wsS_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsS), uint64_t{t_.n1} * t_.keyChunk);
    wsKi_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsKi), uint64_t{t_.kPad} * t_.dIdx);
    wsSx_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsSx), uint64_t{t_.nIdx} * t_.kPad);
    wsDs_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsDs), uint64_t{t_.nIdx} * t_.kPad);
    wsDq_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsDq), uint64_t{t_.nIdx} * t_.dIdx);
    wsQi_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsQi), uint64_t{t_.mKey} * t_.dIdx);
    wsKb_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsKb), uint64_t{t_.keyBlock} * t_.dIdx);
    wsSxk_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsSxk), uint64_t{t_.mKey} * t_.keyBlock);
    wsCoef_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(ws + t_.wsCoef), uint64_t{t_.mKey} * t_.keyBlock);
    wsDkb_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(ws + t_.wsDkb), uint64_t{t_.keyBlock} * t_.dIdx);
    wsDi_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(user + t_.wsDi), uint64_t{t_.t1} * t_.k);
    wsLoss_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(user + t_.wsLoss), t_.t1);
  }

  // Allocates exactly the buffers PlanSliUb counts.
  __aicore__ inline void InitUb() {
    const mgo::tiling::SliUbPlan p = mgo::tiling::PlanSliUb(t_, kWeightsF32);
    pipe_.InitBuffer(gatherBuf_, p.gatherBytes);
    pipe_.InitBuffer(tile_, p.tileBytes);
    pipe_.InitBuffer(tile16_, p.tile16Bytes);
    for (auto& v : vec_) pipe_.InitBuffer(v, p.vecBytes);
    pipe_.InitBuffer(vec16_, p.vec16Bytes);
    for (auto& h : head_) pipe_.InitBuffer(h, p.headBytes);
    pipe_.InitBuffer(wRaw_, p.wBytes);
    pipe_.InitBuffer(rowF_, p.rowFBytes);
    pipe_.InitBuffer(rowH_, p.rowHBytes);
    pipe_.InitBuffer(work_, p.workBytes);
    pipe_.InitBuffer(red_, mgo::tiling::SliUbPlan::kRedBytes);
    gather_.Init(gatherBuf_.template Get<T>(), t_.gatherRows);
  }

  enum Vec : uint32_t { kP = 0, kY = 1, kDi = 2, kTmp0 = 3, kTmp1 = 4, kSlot = 5 };
  enum Head : uint32_t { kMax = 0, kSum = 1, kW = 2, kDw = 3 };
  __aicore__ inline LocalTensor<float> V(Vec v) const { return vec_[v].template Get<float>(); }
  __aicore__ inline LocalTensor<float> H(Head h) const { return head_[h].template Get<float>(); }
  __aicore__ inline GlobalTensor<T> Rope(const GlobalTensor<T>& g, uint64_t off) const {
    return t_.hasRope ? g[off] : g;
  }
  __aicore__ inline float Reduced() const { return red_.template Get<float>().GetValue(0); }

  __aicore__ inline void LoadWeights(uint64_t t, const LocalTensor<float>& dst) {
    LoadWeightsF32(wRaw_.template Get<W>(), wGm_[t * t_.nIdx], dst, t_.nIdx);
  }

  // ---------------------------------------------------------------- row pass
  __aicore__ inline void QueryRow(uint32_t t) {
    const SfaRow r = geo_.Row(t);
    const uint64_t q0 = uint64_t{t} * t_.n1;
    const uint64_t at = geo_.StatsOffset(r);
    for (uint32_t h = 0; h < t_.n1; ++h) {
      H(kMax).SetValue(h, maxGm_.GetValue(at + h));
      H(kSum).SetValue(h, sumGm_.GetValue(at + h));
    }
    LoadWeights(t, H(kW));
    gather_.Copy(wsQf_, qGm_[q0 * t_.d], Rope(qrGm_, q0 * t_.dr), t_.d, t_.n1, t_.d, t_.dr);
    SyncPipes<HardEvent::S_V>();
    Duplicate(V(kP), 0.0f, t_.kPad);

    uint32_t n = 0;
    uint32_t filled = 0;
    const uint64_t slots = uint64_t{t} * t_.k;
    for (uint32_t slot = 0; slot < t_.k; ++slot) {
      uint32_t key = 0;
      uint32_t end = 0;
      if (!geo_.BlockKeys(idxGm_.GetValue(slots + slot), r, &key, &end)) continue;
      const uint64_t k_row = r.kv0 + key;
      gather_.Copy(wsKf_[uint64_t{filled} * t_.dk], kGm_[k_row * t_.d], Rope(krGm_, k_row * t_.dr), t_.d, 1, t_.d,
                   t_.dr);
      gather_.Copy(wsKi_[uint64_t{n} * t_.dIdx], kiGm_[k_row * t_.dIdx], kiGm_, t_.dIdx, 1, t_.dIdx, 0);
      ++filled;
      ++n;
      if (filled == t_.keyChunk) {
        TeacherChunk(n - filled, filled);
        filled = 0;
      }
    }
    if (filled > 0) TeacherChunk(n - filled, filled);
    if (n == 0) {
      EmptyRow(t);
      return;
    }
    Muls(V(kP), V(kP), 1.0f / static_cast<float>(t_.n1), n);

    // Sx = q_index Kiᵀ [nIdx, n]; I = sum_g w_g relu(Sx[g]).
    mmNT_.SetOrgShape(t_.nIdx, n, t_.dIdx, t_.dIdx);
    mmNT_.SetSingleShape(t_.nIdx, n, t_.dIdx);
    mmNT_.SetTensorA(qiGm_[uint64_t{t} * t_.nIdx * t_.dIdx]);
    mmNT_.SetTensorB(wsKi_, true);
    mmNT_.IterateAll(wsSx_);
    const LocalTensor<float> sx = V(kTmp0);
    const LocalTensor<float> tmp = V(kTmp1);
    Duplicate(V(kY), 0.0f, n);
    for (uint32_t g = 0; g < t_.nIdx; ++g) {
      LoadRowsF32(sx, wsSx_[uint64_t{g} * n], 1, n);
      ReluKeepNan(tmp, sx, n);
      Muls(tmp, tmp, H(kW).GetValue(g), n);
      Add(V(kY), V(kY), tmp, n);
      SyncPipes<HardEvent::V_MTE2>();
    }
    SoftmaxAndLoss(t, n);
    Sub(V(kDi), V(kY), V(kP), n);

    // d_weights[g] = sum_j dI relu(Sx[g]); dS[g] = dI w_g [Sx[g] > 0] as 16-bit.
    const LocalTensor<T> ds16 = vec16_.template Get<T>();
    for (uint32_t g = 0; g < t_.nIdx; ++g) {
      LoadRowsF32(sx, wsSx_[uint64_t{g} * n], 1, n);
      ReluKeepNan(tmp, sx, n);
      Mul(tmp, tmp, V(kDi), n);
      ReduceSum(red_.template Get<float>(), tmp, work_.template Get<float>(), n);
      const float w = H(kW).GetValue(g);
      Muls(tmp, V(kDi), w, n);
      SyncPipes<HardEvent::V_S>();
      H(kDw).SetValue(g, Reduced());
      for (uint32_t j = 0; j < n; ++j) tmp.SetValue(j, tmp.GetValue(j) * ReluStep(sx.GetValue(j)));
      SyncPipes<HardEvent::S_V>();
      Cast(ds16, tmp, RoundMode::CAST_RINT, n);
      StoreRows16(wsDs_[uint64_t{g} * n], ds16, 1, n);
      SyncPipes<HardEvent::V_MTE2>();
    }
    WriteWeightsGrad(t);
    StoreDiBySlot(t, r);

    // d_query_index = dS Ki [nIdx, dIdx].
    mmNN_.SetOrgShape(t_.nIdx, t_.dIdx, n, n);
    mmNN_.SetSingleShape(t_.nIdx, t_.dIdx, n);
    mmNN_.SetTensorA(wsDs_);
    mmNN_.SetTensorB(wsKi_);
    mmNN_.IterateAll(wsDq_);
    WriteRows(wsDq_, true, t_.nIdx, uint64_t{t} * t_.nIdx, dqiGm_);
  }

  // Teacher p over keys [col0, col0 + c) of the token: S = Qf Kfᵀ (AIC), then per head
  // P = exp(scale S - max) / sum summed into p (AIV).
  __aicore__ inline void TeacherChunk(uint32_t col0, uint32_t c) {
    mmNT_.SetOrgShape(t_.n1, c, t_.dk, t_.dk);
    mmNT_.SetSingleShape(t_.n1, c, t_.dk);
    mmNT_.SetTensorA(wsQf_);
    mmNT_.SetTensorB(wsKf_, true);
    mmNT_.IterateAll(wsS_);
    const LocalTensor<float> s = tile_.template Get<float>();
    const LocalTensor<float> p = V(kP)[col0];
    const LocalTensor<float> e = V(kTmp1);  // kTmp0 is only ever a copy-in target (Sx rows)
    const uint32_t pitch = static_cast<uint32_t>(mgo::tiling::AlignUp(c, 8));
    for (uint32_t h0 = 0; h0 < t_.n1; h0 += t_.tileRows) {
      const uint32_t rows = t_.n1 - h0 < t_.tileRows ? t_.n1 - h0 : t_.tileRows;
      LoadRowsF32(s, wsS_[uint64_t{h0} * c], rows, c);
      for (uint32_t i = 0; i < rows; ++i) {
        Muls(e, s[i * pitch], t_.scaleValue, c);
        Adds(e, e, -H(kMax).GetValue(h0 + i), c);
        Exp(e, e, c);
        Muls(e, e, 1.0f / H(kSum).GetValue(h0 + i), c);
        Add(p, p, e, c);
      }
      SyncPipes<HardEvent::V_MTE2>();  // the next tile overwrites s
    }
  }

  // y = softmax(I) in place of I; the token's loss sum_j p (ln max(p, 1e-8) - ln max(y, 1e-8))
  // -> wsLoss[t].
  __aicore__ inline void SoftmaxAndLoss(uint32_t t, uint32_t n) {
    const LocalTensor<float> y = V(kY);
    const LocalTensor<float> a = V(kSlot);
    const LocalTensor<float> b = V(kTmp1);
    const LocalTensor<float> red = red_.template Get<float>();
    const LocalTensor<float> work = work_.template Get<float>();
    ReduceMax(red, y, work, n);
    SyncPipes<HardEvent::V_S>();
    Adds(y, y, -Reduced(), n);
    Exp(y, y, n);
    ReduceSum(red, y, work, n);
    SyncPipes<HardEvent::V_S>();
    Muls(y, y, 1.0f / Reduced(), n);
    Maxs(a, V(kP), kLogFloor, n);
    Ln(a, a, n);
    Maxs(b, y, kLogFloor, n);
    Ln(b, b, n);
    // + (y - y): 0 for a finite y (softmax: in [0, 1] or NaN), NaN for a NaN y, which the
    // documented Maxs leaves unspecified (the reference's max(y, 1e-8) keeps it).
    const LocalTensor<float> nan_of_y = V(kDi);  // free until dI = y - p
    Sub(nan_of_y, y, y, n);
    Add(b, b, nan_of_y, n);
    Sub(a, a, b, n);
    Mul(a, a, V(kP), n);
    ReduceSum(red, a, work, n);
    StoreF32(wsLoss_[t], red, 1);
  }

  // d_weights row t from H(kDw) (scalar-written), in W.
  __aicore__ inline void WriteWeightsGrad(uint32_t t) {
    SyncPipes<HardEvent::S_V>();
    SyncPipes<HardEvent::S_MTE3>();
    const DataCopyExtParams one{1, static_cast<uint32_t>(t_.nIdx * sizeof(W)), 0, 0, 0};
    if constexpr (kWeightsF32) {
      SyncPipes<HardEvent::V_MTE3>();
      DataCopyPad(dwGm_[uint64_t{t} * t_.nIdx], H(kDw), one);
    } else {
      const LocalTensor<W> raw = wRaw_.template Get<W>();
      Cast(raw, H(kDw), RoundMode::CAST_RINT, t_.nIdx);
      SyncPipes<HardEvent::V_MTE3>();
      DataCopyPad(dwGm_[uint64_t{t} * t_.nIdx], raw, one);
    }
    SyncPipes<HardEvent::MTE3_V>();
    SyncPipes<HardEvent::MTE3_MTE2>();
  }

  // dI (by visible column) -> wsDi[t, slot] by slot, 0 for -1 / hidden slots.
  __aicore__ inline void StoreDiBySlot(uint32_t t, const SfaRow& r) {
    const LocalTensor<float> by_slot = V(kSlot);
    Duplicate(by_slot, 0.0f, t_.kPad);
    SyncPipes<HardEvent::V_S>();
    uint32_t col = 0;
    const uint64_t slots = uint64_t{t} * t_.k;
    for (uint32_t slot = 0; slot < t_.k; ++slot) {
      uint32_t key = 0;
      uint32_t end = 0;
      if (!geo_.BlockKeys(idxGm_.GetValue(slots + slot), r, &key, &end)) continue;
      by_slot.SetValue(slot, V(kDi).GetValue(col++));
    }
    SyncPipes<HardEvent::S_MTE3>();
    StoreF32(wsDi_[slots], by_slot, t_.k);
  }

  // A token without a visible key: zero gradients, dI and loss.
  __aicore__ inline void EmptyRow(uint32_t t) {
    const LocalTensor<float> z = V(kSlot);
    Duplicate(z, 0.0f, t_.kPad);
    StoreF32(wsDi_[uint64_t{t} * t_.k], z, t_.k);
    StoreF32(wsLoss_[t], z, 1);
    Duplicate(H(kDw), 0.0f, t_.nIdx);
    SyncPipes<HardEvent::V_S>();
    WriteWeightsGrad(t);
    WriteRows(wsDq_, false, t_.nIdx, uint64_t{t} * t_.nIdx, dqiGm_);
  }

  // Output rows row0 + i (i < rows, dIdx wide) = acc row i cast to T; zeros when !any.
  __aicore__ inline void WriteRows(const GlobalTensor<float>& acc, bool any, uint32_t rows, uint64_t row0,
                                   const GlobalTensor<T>& out) {
    const LocalTensor<float> rowf = rowF_.template Get<float>();
    const LocalTensor<T> rowh = rowH_.template Get<T>();
    if (!any) Duplicate(rowf, 0.0f, t_.dIdx);
    for (uint32_t i = 0; i < rows; ++i) {
      if (any) {
        DataCopy(rowf, acc[uint64_t{i} * t_.dIdx], t_.dIdx);
        SyncPipes<HardEvent::MTE2_V>();
      }
      Cast(rowh, rowf, RoundMode::CAST_RINT, t_.dIdx);
      SyncPipes<HardEvent::V_MTE3>();
      DataCopy(out[(row0 + i) * t_.dIdx], rowh, t_.dIdx);
      SyncPipes<HardEvent::MTE3_V>();
      SyncPipes<HardEvent::MTE3_MTE2>();
    }
  }

  // ---------------------------------------------------------------- key pass
  // Key block u: global key tokens [u * keyBlock, ...), possibly spanning batches.
  __aicore__ inline void KeyBlock(uint32_t u) {
    const uint64_t g0 = uint64_t{u} * t_.keyBlock;
    const uint32_t nb = static_cast<uint32_t>(t_.t2 - g0 < t_.keyBlock ? t_.t2 - g0 : t_.keyBlock);
    gather_.Copy(wsKb_, kiGm_[g0 * t_.dIdx], kiGm_, t_.dIdx, nb, t_.dIdx, 0);
    uint32_t count = 0;
    uint32_t chunks = 0;
    const uint32_t b_first = geo_.BatchOf(g0, true);
    const uint32_t b_last = geo_.BatchOf(g0 + nb - 1, true);
    for (uint32_t b = b_first; b <= b_last; ++b) {
      uint64_t q0 = 0;
      uint64_t kv0 = 0;
      uint32_t s1_len = 0;
      uint32_t s2_len = 0;
      geo_.Batch(b, &q0, &s1_len, &kv0, &s2_len);
      for (uint32_t s1 = 0; s1 < s1_len; ++s1) {
        const int64_t limit = geo_.Limit(s1, s1_len, s2_len);
        const uint64_t slots = (q0 + s1) * t_.k;
        for (uint32_t slot = 0; slot < t_.k; ++slot) {
          const int32_t idx = idxGm_.GetValue(slots + slot);
          if (idx < 0 || static_cast<uint32_t>(idx) >= s2_len || idx > limit) continue;
          const uint64_t key = kv0 + static_cast<uint64_t>(idx);
          if (key < g0 || key >= g0 + nb) continue;
          pairT_[count] = static_cast<uint32_t>(q0 + s1);
          pairCol_[count] = static_cast<uint32_t>(key - g0);
          pairDi_[count] = wsDi_.GetValue(slots + slot);
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

  // d_key_index block (+)= Coefᵀ Qi over `count` pairs: Sx of their query_index rows against the
  // block (AIC), Coef[(i, g), col_i] = dI_i w[t_i, g] [Sx > 0] and 0 elsewhere (AIV).
  __aicore__ inline void KeyChunk(uint32_t count, uint32_t nb, uint32_t index) {
    const uint32_t m = count * t_.nIdx;
    const LocalTensor<float> coef = H(kW);  // [m] coefficients dI_i * w[t_i, g] (mKey <= head size)
    for (uint32_t i = 0; i < count; ++i) {
      const uint64_t qi_row = uint64_t{pairT_[i]} * t_.nIdx;
      if (pairDi_[i] != pairDi_[i]) {
        CopyQiRowsNanAsZero(qi_row, i);
      } else {
        gather_.Copy(wsQi_[uint64_t{i} * t_.nIdx * t_.dIdx], qiGm_[qi_row * t_.dIdx], qiGm_, t_.dIdx, t_.nIdx,
                     t_.dIdx, 0);
      }
      LoadWeights(pairT_[i], H(kDw));
      for (uint32_t g = 0; g < t_.nIdx; ++g) coef.SetValue(i * t_.nIdx + g, pairDi_[i] * H(kDw).GetValue(g));
    }
    mmNT_.SetOrgShape(m, nb, t_.dIdx, t_.dIdx);
    mmNT_.SetSingleShape(m, nb, t_.dIdx);
    mmNT_.SetTensorA(wsQi_);
    mmNT_.SetTensorB(wsKb_, true);
    mmNT_.IterateAll(wsSxk_);
    const LocalTensor<float> sxk = tile_.template Get<float>();
    LoadRowsF32(sxk, wsSxk_, m, nb);
    SyncPipes<HardEvent::MTE2_S>();
    const uint32_t pitch = static_cast<uint32_t>(mgo::tiling::AlignUp(nb, 8));
    for (uint32_t row = 0; row < m; ++row) {
      const uint32_t i = row / t_.nIdx;
      coef.SetValue(row, coef.GetValue(row) * ReluStep(sxk.GetValue(row * pitch + pairCol_[i])));
    }
    // Coefficient rows of keyBlock (= 16) columns: one 32-byte row of 16-bit values each.
    const uint32_t kb = t_.keyBlock;
    SyncPipes<HardEvent::S_V>();
    Duplicate(sxk, 0.0f, m * kb);
    SyncPipes<HardEvent::V_S>();
    for (uint32_t row = 0; row < m; ++row) sxk.SetValue(row * kb + pairCol_[row / t_.nIdx], coef.GetValue(row));
    SyncPipes<HardEvent::S_V>();
    const LocalTensor<T> c16 = tile16_.template Get<T>();
    Cast(c16, sxk, RoundMode::CAST_RINT, m * kb);
    StoreRows16(wsCoef_, c16, m, nb);
    SyncPipes<HardEvent::V_MTE2>();
    mmTN_.SetOrgShape(nb, t_.dIdx, m, m);
    mmTN_.SetSingleShape(nb, t_.dIdx, m);
    mmTN_.SetTensorA(wsCoef_, true);
    mmTN_.SetTensorB(wsQi_);
    mmTN_.IterateAll(wsDkb_, index > 0 ? 1 : 0);
  }

  // query_index rows qi_row.. of pair i -> wsQi_ with NaN read as 0. Coefᵀ Qi multiplies the pair's
  // rows by the zero coefficients of the block's other keys too, and 0 * NaN = NaN would reach keys
  // the token never selected. Only a pair with a NaN dI comes here: a NaN in query_index makes the
  // token's dI NaN, so its own key still gets NaN * 0 = NaN in every element, as in the reference.
  __aicore__ inline void CopyQiRowsNanAsZero(uint64_t qi_row, uint32_t i) {
    const LocalTensor<T> buf = gatherBuf_.template Get<T>();
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

  // loss = sum over tokens (ascending) of the per-token losses, float32.
  __aicore__ inline void Loss() {
    float acc = 0.0f;
    for (uint32_t t = 0; t < t_.t1; ++t) acc += wsLoss_.GetValue(t);
    const LocalTensor<float> red = red_.template Get<float>();
    red.SetValue(0, acc);
    SyncPipes<HardEvent::S_MTE3>();
    DataCopyPad(lossGm_, red, DataCopyExtParams{1, 4, 0, 0, 0});
  }

  SliTilingData t_{};
  TPipe pipe_;
  Matmul<A, AT, C> mmNT_;
  Matmul<A, A, C> mmNN_;
  Matmul<AT, A, C> mmTN_;
  SfaGeometry geo_;
  RowGather<T> gather_;
  TBuf<TPosition::VECCALC> gatherBuf_, tile_, tile16_, vec_[mgo::tiling::SliUbPlan::kVecs], vec16_,
      head_[mgo::tiling::SliUbPlan::kHeads], wRaw_, rowF_, rowH_, work_, red_;
  uint32_t pairT_[kMaxPairs] = {};
  uint32_t pairCol_[kMaxPairs] = {};
  float pairDi_[kMaxPairs] = {};
  GlobalTensor<T> qGm_, kGm_, qiGm_, kiGm_, qrGm_, krGm_, dqiGm_, dkiGm_;
  GlobalTensor<W> wGm_, dwGm_;
  GlobalTensor<int32_t> idxGm_;
  GlobalTensor<float> maxGm_, sumGm_, lossGm_;
  GlobalTensor<T> wsQf_, wsKf_, wsKi_, wsDs_, wsQi_, wsKb_, wsCoef_;
  GlobalTensor<float> wsS_, wsSx_, wsDq_, wsSxk_, wsDkb_, wsDi_, wsLoss_;
};

}  // namespace mgo::kernel

// Argument order: inputs (absent optional inputs are null), outputs, workspace, tiling.
extern "C" __global__ __aicore__ void sparse_lightning_indexer_grad_kl_loss(
    GM_ADDR query, GM_ADDR key, GM_ADDR query_index, GM_ADDR key_index, GM_ADDR weights, GM_ADDR sparse_indices,
    GM_ADDR softmax_max, GM_ADDR softmax_sum, GM_ADDR query_rope, GM_ADDR key_rope, GM_ADDR actual_seq_lengths_query,
    GM_ADDR actual_seq_lengths_key, GM_ADDR d_query_index, GM_ADDR d_key_index, GM_ADDR d_weights, GM_ADDR loss,
    GM_ADDR workspace, GM_ADDR tiling) {
  using mgo::tiling::DType;
  using mgo::tiling::SparseLightningIndexerGradKlLossTilingKey;
  AscendC::SetSysWorkspace(workspace);
  REGISTER_TILING_DEFAULT(mgo::tiling::SliTilingData);
  GET_TILING_DATA(tiling_data, tiling);
  const mgo::kernel::SliGradIo io{query, key, query_index, key_index, weights, sparse_indices, softmax_max,
                                  softmax_sum, query_rope, key_rope, actual_seq_lengths_query,
                                  actual_seq_lengths_key, d_query_index, d_key_index, d_weights, loss, workspace};
  if (TILING_KEY_IS(SparseLightningIndexerGradKlLossTilingKey(DType::kFloat16, false))) {
    mgo::kernel::SparseLightningIndexerGradKernel<half, half> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(SparseLightningIndexerGradKlLossTilingKey(DType::kFloat16, true))) {
    mgo::kernel::SparseLightningIndexerGradKernel<half, float> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(SparseLightningIndexerGradKlLossTilingKey(DType::kBFloat16, false))) {
    mgo::kernel::SparseLightningIndexerGradKernel<bfloat16_t, bfloat16_t> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(SparseLightningIndexerGradKlLossTilingKey(DType::kBFloat16, true))) {
    mgo::kernel::SparseLightningIndexerGradKernel<bfloat16_t, float> op;
    op.Run(io, tiling_data);
  }
}
