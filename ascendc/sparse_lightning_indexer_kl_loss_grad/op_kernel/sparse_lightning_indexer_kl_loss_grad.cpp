// SparseLightningIndexerKLLossGrad (CANN's V4 indexer KL gradient; docs/contract.md section 9.2) as a
// mixed kernel: LightningIndexerGrad with dI computed from a target given per slot instead of read.
// The AIVs gather and do the element-wise work, the AIC of each core multiplies (high-level Matmul,
// float32 accumulation of 16-bit operands); the score backward is common/indexer_grad_kernel_common.h.
//   row pass (query tokens t, tiling.rowStart): the visible selected key_index rows of t (slot order;
//     -1, out-of-range and hidden slots skipped, their target never read) are gathered with the
//     target p of their slots; Sx = q_index Kiᵀ (AIC); I = sum_g w_g relu(Sx[g]), y = softmax(I) over
//     those slots, the token's loss sum_s p (ln max(p, 1e-8) - ln max(y, 1e-8)) -> workspace,
//     dI = y sum(p) - p (the exact gradient for a target not summing to 1) -> workspace by slot,
//     softmax_out = y by slot (0 at every other slot); d_weights, dS and d_query_index (shared core);
//   key pass (after SyncAll, tiling.keyBlockStart): d_key_index by key-block ownership from the stored
//     dI, each sum formed by one core in an order the shape fixes; AIV 0 then sums the per-token losses
//     in token order into loss. Same bits for any core count and execution order.
// Compressed keys (cmp_ratio, cmp_residual_k; docs/contract.md section 9.1) change only which slots are
// visible (the geometry's LimitOf).
#include <type_traits>

#include "kernel_operator.h"
#include "lib/matmul_intf.h"

#include "../../common/indexer_grad_kernel_common.h"
#include "../sparse_lightning_indexer_kl_loss_grad_tiling.h"

namespace mgo::kernel {

using mgo::tiling::SlkgTilingData;

struct SlkgIo {
  // One per line: GM_ADDR is the macro `__gm__ uint8_t*`, so `GM_ADDR a, b;` makes only a a pointer.
  GM_ADDR query_index;
  GM_ADDR key_index;
  GM_ADDR weights;
  GM_ADDR indices;
  GM_ADDR target;
  GM_ADDR lens_q;
  GM_ADDR lens_k;
  GM_ADDR cmp_residual_k;
  GM_ADDR d_query_index;
  GM_ADDR d_key_index;
  GM_ADDR d_weights;
  GM_ADDR softmax_out;
  GM_ADDR loss;
  GM_ADDR workspace;
};

inline constexpr float kKlLogFloor = 1e-8f;

// T: query_index/key_index dtype (half or bfloat16_t); W: weights and d_weights (T or float).
template <typename T, typename W>
class SparseLightningIndexerKLLossGradKernel {
  using Core = IndexerGradCore<T, W, SlkgTilingData>;

 public:
  __aicore__ inline void Run(const SlkgIo& io, const SlkgTilingData& t) {
    t_ = t;
    const TCubeTiling nt = ToCubeTiling(t.mmNT);
    const TCubeTiling nn = ToCubeTiling(t.mmNN);
    const TCubeTiling tn = ToCubeTiling(t.mmTN);
    REGIST_MATMUL_OBJ(&pipe_, GetSysWorkSpacePtr(), mmNT_, &nt, mmNN_, &nn, mmTN_, &tn);
    if ASCEND_IS_AIC {
      return;
    }
    geo_.Init(IndexerGeometry(t, 1), io.lens_q, io.lens_k);
    geo_.InitCmp(static_cast<uint32_t>(t.attrs.cmp_ratio), t.cmpResidual != 0 ? io.cmp_residual_k : nullptr);
    InitGm(io);
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
  __aicore__ inline void InitGm(const SlkgIo& io) {
    const uint64_t slots = uint64_t{t_.t1} * t_.k;
    targetGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.target), slots);
    yGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.softmax_out), slots);
    lossGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.loss), 1);
    GM_ADDR user = GetUserWorkspace(io.workspace);
    aivWs_ = user + static_cast<uint64_t>(GetBlockIdx()) * t_.aivWsBytes;
    wsDi_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(user + t_.wsDi), slots);
    wsLoss_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(user + t_.wsLoss), t_.t1);
  }

  // Allocates exactly the buffers PlanSlkgUb counts.
  __aicore__ inline void InitUb(const SlkgIo& io) {
    ub_.Init(pipe_, mgo::tiling::PlanSlkgUb(t_, std::is_same_v<W, float>));
    const typename Core::Io core_io{io.query_index, io.key_index, io.weights, io.indices, io.d_query_index,
                                    io.d_key_index, io.d_weights, wsDi_};
    // kTmp0 is only ever a copy-in target (Sx rows), kTmp1 scratch.
    core_.Init(t_, core_io, aivWs_, ub_.template View<T, W>(kTmp0, kTmp1, kDi, kW, kDw), &geo_, &mmNT_, &mmNN_,
               &mmTN_);
  }

  // kP holds the target by column until dI is formed, then serves as the by-slot row (StoreBySlot, EmptyRow).
  enum Vec : uint32_t { kP = 0, kY = 1, kDi = 2, kTmp0 = 3, kTmp1 = 4 };
  enum Head : uint32_t { kW = 0, kDw = 1 };
  // Not const: TBuf::Get is a non-const member in the real API (kernel_tpipe.h).
  __aicore__ inline LocalTensor<float> V(Vec v) { return ub_.Vec(v); }
  __aicore__ inline LocalTensor<float> Red() { return ub_.red.template Get<float>(); }
  __aicore__ inline float Reduced() { return Red().GetValue(0); }

  // ---------------------------------------------------------------- row pass
  __aicore__ inline void QueryRow(uint32_t t) {
    const SfaRow r = geo_.Row(t);
    core_.LoadWeights(t, ub_.Head(kW));
    const uint64_t slots = uint64_t{t} * t_.k;
    const LocalTensor<float> p = V(kP);
    const uint32_t n = core_.GatherKeyIndexRows(
        t, r, [&](uint32_t slot, uint64_t, uint32_t col) { p.SetValue(col, targetGm_.GetValue(slots + slot)); });
    if (n == 0) {
      EmptyRow(t);
      return;
    }
    SyncPipes<HardEvent::S_V>();  // p was written by the scalar unit

    // Sx = q_index Kiᵀ [nIdx, n]; I = sum_g w_g relu(Sx[g]).
    core_.Scores(t, n);
    const LocalTensor<float> sx = V(kTmp0);
    const LocalTensor<float> tmp = V(kTmp1);
    Duplicate(V(kY), 0.0f, n);
    for (uint32_t g = 0; g < t_.nIdx; ++g) {
      core_.LoadScoreRow(g, n);
      ReluKeepNan(tmp, sx, n);
      Muls(tmp, tmp, ub_.Head(kW).GetValue(g), n);
      Add(V(kY), V(kY), tmp, n);
      SyncPipes<HardEvent::V_MTE2>();
    }
    SoftmaxAndLoss(t, n);
    // dI = y sum(p) - p.
    ReduceSum(Red(), p, ub_.work.template Get<float>(), n);
    SyncPipes<HardEvent::V_S>();
    Muls(V(kDi), V(kY), Reduced(), n);
    Sub(V(kDi), V(kDi), p, n);
    StoreBySlot(t, r, V(kDi), wsDi_);
    StoreBySlot(t, r, V(kY), yGm_);
    core_.RowGrads(t, n);
  }

  // y = softmax(I) in place of I; the token's loss sum_j p (ln max(p, 1e-8) - ln max(y, 1e-8))
  // -> wsLoss[t]. Scratch: kTmp1 and kDi (free until dI).
  __aicore__ inline void SoftmaxAndLoss(uint32_t t, uint32_t n) {
    const LocalTensor<float> y = V(kY);
    const LocalTensor<float> a = V(kDi);
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
    Maxs(b, y, kKlLogFloor, n);
    Ln(b, b, n);
    // + (y - y): 0 for a finite y (softmax: in [0, 1] or NaN), NaN for a NaN y, which the
    // documented Maxs leaves unspecified (the reference's max(y, 1e-8) keeps it).
    Sub(a, y, y, n);
    Add(b, b, a, n);
    Maxs(a, V(kP), kKlLogFloor, n);
    Ln(a, a, n);
    Sub(a, a, b, n);
    Mul(a, a, V(kP), n);
    ReduceSum(red, a, work, n);
    StoreF32(wsLoss_[t], red, 1);
  }

  // `by_col` (one value per visible column) -> dst[t, slot] by slot: every slot for an output, 0 at
  // -1 / hidden slots (only the visible slots are ever read back from the dI workspace). Uses kP: call
  // after dI is formed.
  __aicore__ inline void StoreBySlot(uint32_t t, const SfaRow& r, const LocalTensor<float>& by_col,
                                     const GlobalTensor<float>& dst) {
    const LocalTensor<float> by_slot = V(kP);
    Duplicate(by_slot, 0.0f, t_.kPad);
    SyncPipes<HardEvent::V_S>();
    uint32_t col = 0;
    const uint64_t slots = uint64_t{t} * t_.k;
    const GlobalTensor<int32_t>& idx = core_.Indices();
    for (uint32_t slot = 0; slot < t_.k; ++slot) {
      uint32_t key = 0;
      uint32_t end = 0;
      if (!geo_.BlockKeys(idx.GetValue(slots + slot), r, &key, &end)) continue;
      by_slot.SetValue(slot, by_col.GetValue(col++));
    }
    SyncPipes<HardEvent::S_MTE3>();
    StoreF32(dst[slots], by_slot, t_.k);
  }

  // A token without a visible key: zero gradients, softmax_out row and loss (its dI is never read).
  __aicore__ inline void EmptyRow(uint32_t t) {
    const LocalTensor<float> z = V(kP);
    Duplicate(z, 0.0f, t_.kPad);
    StoreF32(yGm_[uint64_t{t} * t_.k], z, t_.k);
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

  SlkgTilingData t_{};
  TPipe pipe_;
  typename Core::MmNT mmNT_;
  typename Core::MmNN mmNN_;
  typename Core::MmTN mmTN_;
  SfaGeometry geo_;
  Core core_;
  IndexerGradUbBufs<mgo::tiling::SlkgUbPlan> ub_;
  GM_ADDR aivWs_ = nullptr;
  GlobalTensor<float> targetGm_, yGm_, lossGm_, wsDi_, wsLoss_;
};

}  // namespace mgo::kernel

// Argument order: inputs (absent optional inputs are null), outputs, workspace, tiling. cmp_residual_k is
// read only where the tiling says it is given and cmp_ratio > 1 (at ratio 1 every residual is 0).
extern "C" __global__ __aicore__ void sparse_lightning_indexer_kl_loss_grad(
    GM_ADDR query_index, GM_ADDR key_index, GM_ADDR weights, GM_ADDR sparse_indices, GM_ADDR attn_softmax_l1_norm,
    GM_ADDR actual_seq_lengths_query, GM_ADDR actual_seq_lengths_key, GM_ADDR cmp_residual_k, GM_ADDR d_query_index,
    GM_ADDR d_key_index, GM_ADDR d_weights, GM_ADDR softmax_out, GM_ADDR loss, GM_ADDR workspace, GM_ADDR tiling) {
  using mgo::tiling::DType;
  using mgo::tiling::SparseLightningIndexerKLLossGradTilingKey;
  AscendC::SetSysWorkspace(workspace);
  REGISTER_TILING_DEFAULT(mgo::tiling::SlkgTilingData);
  GET_TILING_DATA(tiling_data, tiling);
  const mgo::kernel::SlkgIo io{query_index,    key_index,     weights,     sparse_indices, attn_softmax_l1_norm,
                               actual_seq_lengths_query, actual_seq_lengths_key, cmp_residual_k, d_query_index,
                               d_key_index,    d_weights,     softmax_out, loss,           workspace};
  if (TILING_KEY_IS(SparseLightningIndexerKLLossGradTilingKey(DType::kFloat16, false))) {
    mgo::kernel::SparseLightningIndexerKLLossGradKernel<half, half> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(SparseLightningIndexerKLLossGradTilingKey(DType::kFloat16, true))) {
    mgo::kernel::SparseLightningIndexerKLLossGradKernel<half, float> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(SparseLightningIndexerKLLossGradTilingKey(DType::kBFloat16, false))) {
    mgo::kernel::SparseLightningIndexerKLLossGradKernel<bfloat16_t, bfloat16_t> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(SparseLightningIndexerKLLossGradTilingKey(DType::kBFloat16, true))) {
    mgo::kernel::SparseLightningIndexerKLLossGradKernel<bfloat16_t, float> op;
    op.Run(io, tiling_data);
  }
}
