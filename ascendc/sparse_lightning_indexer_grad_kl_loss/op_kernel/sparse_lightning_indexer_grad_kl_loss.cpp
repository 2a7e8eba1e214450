// SparseLightningIndexerGradKLLoss as a mixed kernel: the AIVs gather and do the element-wise
// work, the AIC of each core multiplies (high-level Matmul, float32 accumulation). docs/contract.md section 4.2.
//
// Row pass (query tokens t, tiling.rowStart): the visible selected keys j of t (slot order) are
// gathered: cat(key, key_rope) rows in chunks of keyChunk for S = cat(q, q_rope) Kfᵀ (AIC) and
// the teacher p_j = (1/N1) sum_h exp(scale S[h, j] - max_h) / sum_h (AIV, not renormalised);
// key_index rows all at once for Sx = q_index Kiᵀ (AIC). Then (AIV) I = sum_g w_g relu(Sx[g]),
// y = softmax(I), the token's loss sum_j p (ln max(p, 1e-8) - ln max(y, 1e-8)) -> workspace,
// dI = y - p -> workspace (by slot); d_weights, dS and d_query_index follow from dI as in
// common/indexer_grad_kernel_common.h (shared with LightningIndexerGrad). relu and [Sx > 0] keep
// NaN as the reference does (ReluKeepNan, ReluStep): a NaN score makes its token's outputs NaN.
// Key pass (after SyncAll, tiling.keyBlockStart): d_key_index by key-block ownership from the
// stored dI (IndexerGradCore::KeyBlock): every d_key_index sum is formed by one core in an order
// fixed by the shape, so the bits do not depend on the core count or on the order cores run in
// (deterministic in every mode, which honours deterministic = true). AIV 0 then sums the per-token
// losses in token order into loss.
// With sinks (float32 [N1]; the statistics are the forward's, which hold the sink) each head's
// probabilities miss its sink's share, so the teacher is renormalised to sum to 1 over the token's
// keys (CANN's 1 / (N1 - sum_h P_sink), contract 4.2): p_j = sum_h P[h, j] / sum_{h, j'} P[h, j'].
// CANN's float32 N1 - sum_h P_sink cancels to 0 once a sink is some 17 above the logits; here the
// sum is formed from log P[h, j] - log P_ref = scale S[h, j] - (max_h - min_h' max_h') - ln sum_h,
// exponentiated after subtracting the token's running maximum (p rescaled when it grows), so every
// finite sink gives a finite teacher equal to the reference's. Only the statistics carry the sinks;
// their values decide whether the path is taken: all sinks -inf is no sink, bit for bit.
// Compressed keys (cmp_ratio, cmp_residual_k; docs/contract.md section 9.1): the main attention's key and
// the indexer key are both compressed and share the token's row geometry, so the rule (the geometry's
// LimitOf) hides the same slots from the teacher, the index scores and the key pass.
#include <type_traits>

#include "kernel_operator.h"
#include "lib/matmul_intf.h"

#include "../../common/indexer_grad_kernel_common.h"
#include "../sparse_lightning_indexer_grad_kl_loss_tiling.h"

namespace mgo::kernel {

using mgo::tiling::SliTilingData;

struct SliGradIo {
  // One per line: GM_ADDR is the macro `__gm__ uint8_t*`, so `GM_ADDR a, b;` makes only a a pointer.
  GM_ADDR query;
  GM_ADDR key;
  GM_ADDR query_index;
  GM_ADDR key_index;
  GM_ADDR weights;
  GM_ADDR indices;
  GM_ADDR softmax_max;
  GM_ADDR softmax_sum;
  GM_ADDR query_rope;
  GM_ADDR key_rope;
  GM_ADDR lens_q;
  GM_ADDR lens_k;
  GM_ADDR sinks;
  GM_ADDR cmp_residual_k;
  GM_ADDR d_query_index;
  GM_ADDR d_key_index;
  GM_ADDR d_weights;
  GM_ADDR loss;
  GM_ADDR workspace;
};

inline constexpr float kLogFloor = 1e-8f;

// T: query/key/index dtype (half or bfloat16_t); W: weights and d_weights (T or float).
template <typename T, typename W>
class SparseLightningIndexerGradKernel {
  using Core = IndexerGradCore<T, W, SliTilingData>;

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
    geo_.InitCmp(static_cast<uint32_t>(t.attrs.cmp_ratio), t.cmpResidual != 0 ? io.cmp_residual_k : nullptr);
    InitUb(io);
    const auto aiv = static_cast<uint32_t>(GetBlockIdx());
    for (uint32_t row = t.rowStart[aiv]; row < t.rowStart[aiv + 1]; ++row) QueryRow(row);
    SyncAll();  // every dI and per-token loss is in the workspace
    for (uint32_t u = t.keyBlockStart[aiv]; u < t.keyBlockStart[aiv + 1]; ++u) core_.KeyBlock(u);
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
    maxGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.softmax_max), q_rows);
    sumGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.softmax_sum), q_rows);
    if (t_.hasRope) {
      qrGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.query_rope), q_rows * t_.dr);
      krGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(io.key_rope), uint64_t{t_.t2} * t_.dr);
    }
    lossGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.loss), 1);
    if (t_.hasSinks) {
      sinkGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.sinks), t_.n1);
      // A sink >= the lowest float: neither -inf nor NaN (as the reference's sinks > -inf).
      for (uint32_t h = 0; h < t_.n1; ++h) renormalise_ = renormalise_ || sinkGm_.GetValue(h) >= kLowestFloat;
    }
    GM_ADDR user = GetUserWorkspace(io.workspace);
    aivWs_ = user + static_cast<uint64_t>(GetBlockIdx()) * t_.aivWsBytes;
    wsQf_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(aivWs_ + t_.wsQf), uint64_t{t_.n1} * t_.dk);
    wsKf_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(aivWs_ + t_.wsKf), uint64_t{t_.keyChunk} * t_.dk);
    wsS_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(aivWs_ + t_.wsS), uint64_t{t_.n1} * t_.keyChunk);
    wsDi_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(user + t_.wsDi), uint64_t{t_.t1} * t_.k);
    wsLoss_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(user + t_.wsLoss), t_.t1);
  }

  // Allocates exactly the buffers PlanSliUb counts.
  __aicore__ inline void InitUb(const SliGradIo& io) {
    ub_.Init(pipe_, mgo::tiling::PlanSliUb(t_, std::is_same_v<W, float>));
    const typename Core::Io core_io{io.query_index, io.key_index, io.weights, io.indices, io.d_query_index,
                                    io.d_key_index, io.d_weights, wsDi_};
    // kTmp0 is only ever a copy-in target (Sx rows), kTmp1 scratch.
    core_.Init(t_, core_io, aivWs_, ub_.template View<T, W>(kTmp0, kTmp1, kDi, kW, kDw), &geo_, &mmNT_, &mmNN_,
               &mmTN_);
  }

  enum Vec : uint32_t { kP = 0, kY = 1, kDi = 2, kTmp0 = 3, kTmp1 = 4, kSlot = 5 };
  enum Head : uint32_t { kMax = 0, kSum = 1, kW = 2, kDw = 3 };
  // Not const: TBuf::Get is a non-const member in the real API (kernel_tpipe.h).
  __aicore__ inline LocalTensor<float> V(Vec v) { return ub_.Vec(v); }
  __aicore__ inline LocalTensor<float> H(Head h) { return ub_.Head(h); }
  __aicore__ inline GlobalTensor<T> Rope(const GlobalTensor<T>& g, uint64_t off) const {
    return t_.hasRope ? g[off] : g;
  }
  __aicore__ inline LocalTensor<float> Red() { return ub_.red.template Get<float>(); }
  __aicore__ inline float Reduced() { return Red().GetValue(0); }
  static constexpr int32_t kRedFloats = 8;  // the 32-byte reduce buffer

  // ---------------------------------------------------------------- row pass
  __aicore__ inline void QueryRow(uint32_t t) {
    const SfaRow r = geo_.Row(t);
    const uint64_t q0 = uint64_t{t} * t_.n1;
    const uint64_t at = geo_.StatsOffset(r);
    float min_max = 0.0f;
    for (uint32_t h = 0; h < t_.n1; ++h) {
      const float mx = maxGm_.GetValue(at + h);
      min_max = h == 0 || mx < min_max ? mx : min_max;
      H(kMax).SetValue(h, mx);
      H(kSum).SetValue(h, sumGm_.GetValue(at + h));
    }
    core_.LoadWeights(t, H(kW));
    RowGather<T>& gather = core_.Gather();
    gather.Copy(wsQf_, qGm_[q0 * t_.d], Rope(qrGm_, q0 * t_.dr), t_.d, t_.n1, t_.d, t_.dr);
    SyncPipes<HardEvent::S_V>();
    Duplicate(V(kP), 0.0f, t_.kPad);
    if (renormalise_) HeadLogOffsets(min_max);

    uint32_t filled = 0;
    const uint32_t n = core_.GatherKeyIndexRows(t, r, [&](uint32_t, uint64_t k_row, uint32_t col) {
      gather.Copy(wsKf_[uint64_t{filled} * t_.dk], kGm_[k_row * t_.d], Rope(krGm_, k_row * t_.dr), t_.d, 1, t_.d,
                  t_.dr);
      if (++filled == t_.keyChunk) {
        TeacherChunk(col + 1 - filled, filled);
        filled = 0;
      }
    });
    if (filled > 0) TeacherChunk(n - filled, filled);
    if (n == 0) {
      EmptyRow(t);
      return;
    }
    Muls(V(kP), V(kP), renormalise_ ? 1.0f / TeacherSum(n) : 1.0f / static_cast<float>(t_.n1), n);

    // Sx = q_index Kiᵀ [nIdx, n]; I = sum_g w_g relu(Sx[g]).
    core_.Scores(t, n);
    const LocalTensor<float> sx = V(kTmp0);
    const LocalTensor<float> tmp = V(kTmp1);
    Duplicate(V(kY), 0.0f, n);
    for (uint32_t g = 0; g < t_.nIdx; ++g) {
      core_.LoadScoreRow(g, n);
      ReluKeepNan(tmp, sx, n);
      Muls(tmp, tmp, H(kW).GetValue(g), n);
      Add(V(kY), V(kY), tmp, n);
      SyncPipes<HardEvent::V_MTE2>();
    }
    SoftmaxAndLoss(t, n);
    Sub(V(kDi), V(kY), V(kP), n);
    StoreDiBySlot(t, r);
    core_.RowGrads(t, n);
  }

  // Teacher p over keys [col0, col0 + c) of the token: S = Qf Kfᵀ (AIC), then per head
  // P = exp(scale S - max) / sum summed into p (AIV); with sinks the shifted form (ShiftedTile).
  __aicore__ inline void TeacherChunk(uint32_t col0, uint32_t c) {
    mmNT_.SetOrgShape(t_.n1, c, t_.dk, t_.dk);
    mmNT_.SetSingleShape(t_.n1, c, t_.dk);
    mmNT_.SetTensorA(wsQf_);
    mmNT_.SetTensorB(wsKf_, true);
    mmNT_.IterateAll(wsS_);
    const LocalTensor<float> s = ub_.tile.template Get<float>();
    const LocalTensor<float> p = V(kP)[col0];
    const LocalTensor<float> e = V(kTmp1);  // kTmp0 is only ever a copy-in target (Sx rows)
    const uint32_t pitch = static_cast<uint32_t>(mgo::tiling::AlignUp(c, 8));
    for (uint32_t h0 = 0; h0 < t_.n1; h0 += t_.tileRows) {
      const uint32_t rows = t_.n1 - h0 < t_.tileRows ? t_.n1 - h0 : t_.tileRows;
      LoadRowsF32(s, wsS_[uint64_t{h0} * c], rows, c);
      if (renormalise_) {
        ShiftedTile(s, pitch, h0, rows, col0, c);
      } else {
        AddHeadProbs(p, s, pitch, h0, rows, c, t_.scaleValue, H(kMax), H(kSum), e);
      }
      SyncPipes<HardEvent::V_MTE2>();  // the next tile overwrites s
    }
  }

  // With sinks: H(kSum) <- the per-head log offset (max_h - min_max) + ln sum_h. The common
  // min_max cancels in the renormalisation; leaving it out keeps a sink's large max (1e4) out of the
  // float32 exponents, where its rounding (5e-4 at 1e4) would perturb every key's weight.
  __aicore__ inline void HeadLogOffsets(float min_max) {
    Ln(H(kSum), H(kSum), t_.n1);
    Adds(H(kMax), H(kMax), -min_max, t_.n1);
    Add(H(kSum), H(kSum), H(kMax), t_.n1);
    SyncPipes<HardEvent::V_S>();  // TeacherChunk reads the offsets as scalars
    shifted_ = false;
  }

  // Head rows [h0, h0 + rows) of the S tile `s` (row pitch `pitch`) for keys [col0, col0 + c):
  // e = scale S - offset_h in place; p += exp(e - shift), shift the token's running maximum of e.
  // When a tile raises it, the p accumulated so far ([0, col0 + c)) is rescaled by exp(old - new).
  __aicore__ inline void ShiftedTile(const LocalTensor<float>& s, uint32_t pitch, uint32_t h0, uint32_t rows,
                                     uint32_t col0, uint32_t c) {
    const LocalTensor<float> work = ub_.work.template Get<float>();
    float top = shift_;
    bool seen = shifted_;
    for (uint32_t i = 0; i < rows; ++i) {
      const LocalTensor<float> e = s[i * pitch];
      Muls(e, e, t_.scaleValue, c);
      Adds(e, e, -H(kSum).GetValue(h0 + i), c);
      ReduceMax(Red(), e, work, c);
      SyncPipes<HardEvent::V_S>();
      const float m = Reduced();
      if (!seen || m > top) top = m;  // a NaN maximum is skipped here and reaches p through exp
      seen = true;
    }
    if (shifted_ && top > shift_) {
      Duplicate(Red(), shift_ - top, kRedFloats);
      Exp(Red(), Red(), kRedFloats);
      SyncPipes<HardEvent::V_S>();
      Muls(V(kP), V(kP), Reduced(), col0 + c);
    }
    if (!shifted_ || top > shift_) shift_ = top;
    shifted_ = true;
    const LocalTensor<float> p = V(kP)[col0];
    const LocalTensor<float> x = V(kTmp1);
    for (uint32_t i = 0; i < rows; ++i) {
      Adds(x, s[i * pitch], -shift_, c);
      Exp(x, x, c);
      Add(p, p, x, c);
    }
  }

  // sum_j p_j over the token's n keys (the shifted form's normaliser).
  __aicore__ inline float TeacherSum(uint32_t n) {
    ReduceSum(Red(), V(kP), ub_.work.template Get<float>(), n);
    SyncPipes<HardEvent::V_S>();
    return Reduced();
  }

  // y = softmax(I) in place of I; the token's loss sum_j p (ln max(p, 1e-8) - ln max(y, 1e-8))
  // -> wsLoss[t].
  __aicore__ inline void SoftmaxAndLoss(uint32_t t, uint32_t n) {
    const LocalTensor<float> y = V(kY);
    const LocalTensor<float> a = V(kSlot);
    const LocalTensor<float> b = V(kTmp1);
    const LocalTensor<float> red = Red();
    const LocalTensor<float> work = ub_.work.template Get<float>();
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

  // dI (by visible column) -> wsDi[t, slot] by slot, 0 for -1 / hidden slots.
  __aicore__ inline void StoreDiBySlot(uint32_t t, const SfaRow& r) {
    const LocalTensor<float> by_slot = V(kSlot);
    Duplicate(by_slot, 0.0f, t_.kPad);
    SyncPipes<HardEvent::V_S>();
    uint32_t col = 0;
    const uint64_t slots = uint64_t{t} * t_.k;
    const GlobalTensor<int32_t>& idx = core_.Indices();
    for (uint32_t slot = 0; slot < t_.k; ++slot) {
      uint32_t key = 0;
      uint32_t end = 0;
      if (!geo_.BlockKeys(idx.GetValue(slots + slot), r, &key, &end)) continue;
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
    core_.EmptyRow(t);
  }

  // loss = sum over tokens (ascending) of the per-token losses, float32.
  __aicore__ inline void Loss() {
    float acc = 0.0f;
    for (uint32_t t = 0; t < t_.t1; ++t) acc += wsLoss_.GetValue(t);
    const LocalTensor<float> red = Red();
    red.SetValue(0, acc);
    SyncPipes<HardEvent::S_MTE3>();
    DataCopyPad(lossGm_, red, DataCopyExtParams{1, 4, 0, 0, 0});
  }

  SliTilingData t_{};
  TPipe pipe_;
  typename Core::MmNT mmNT_;
  typename Core::MmNN mmNN_;
  typename Core::MmTN mmTN_;
  SfaGeometry geo_;
  Core core_;
  IndexerGradUbBufs<mgo::tiling::SliUbPlan> ub_;
  GM_ADDR aivWs_ = nullptr;
  GlobalTensor<T> qGm_, kGm_, qrGm_, krGm_;
  GlobalTensor<float> maxGm_, sumGm_, lossGm_, sinkGm_;
  GlobalTensor<T> wsQf_, wsKf_;
  GlobalTensor<float> wsS_, wsDi_, wsLoss_;
  bool renormalise_ = false;  // some sink above -inf: the shifted, renormalised teacher
  bool shifted_ = false;      // the token's running shift is set
  float shift_ = 0.0f;
};

}  // namespace mgo::kernel

// Argument order: inputs (absent optional inputs are null), outputs, workspace, tiling.
// cmp_residual_k is read only where the tiling says it is given and cmp_ratio > 1 (at ratio 1 every
// residual is 0).
extern "C" __global__ __aicore__ void sparse_lightning_indexer_grad_kl_loss(
    GM_ADDR query, GM_ADDR key, GM_ADDR query_index, GM_ADDR key_index, GM_ADDR weights, GM_ADDR sparse_indices,
    GM_ADDR softmax_max, GM_ADDR softmax_sum, GM_ADDR query_rope, GM_ADDR key_rope, GM_ADDR actual_seq_lengths_query,
    GM_ADDR actual_seq_lengths_key, GM_ADDR sinks, GM_ADDR cmp_residual_k, GM_ADDR d_query_index,
    GM_ADDR d_key_index, GM_ADDR d_weights, GM_ADDR loss, GM_ADDR workspace, GM_ADDR tiling) {
  using mgo::tiling::DType;
  using mgo::tiling::SparseLightningIndexerGradKLLossTilingKey;
  AscendC::SetSysWorkspace(workspace);
  REGISTER_TILING_DEFAULT(mgo::tiling::SliTilingData);
  GET_TILING_DATA(tiling_data, tiling);
  const mgo::kernel::SliGradIo io{query, key, query_index, key_index, weights, sparse_indices, softmax_max,
                                  softmax_sum, query_rope, key_rope, actual_seq_lengths_query,
                                  actual_seq_lengths_key, sinks, cmp_residual_k, d_query_index, d_key_index, d_weights, loss,
                                  workspace};
  if (TILING_KEY_IS(SparseLightningIndexerGradKLLossTilingKey(DType::kFloat16, false))) {
    mgo::kernel::SparseLightningIndexerGradKernel<half, half> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(SparseLightningIndexerGradKLLossTilingKey(DType::kFloat16, true))) {
    mgo::kernel::SparseLightningIndexerGradKernel<half, float> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(SparseLightningIndexerGradKLLossTilingKey(DType::kBFloat16, false))) {
    mgo::kernel::SparseLightningIndexerGradKernel<bfloat16_t, bfloat16_t> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(SparseLightningIndexerGradKLLossTilingKey(DType::kBFloat16, true))) {
    mgo::kernel::SparseLightningIndexerGradKernel<bfloat16_t, float> op;
    op.Run(io, tiling_data);
  }
}
