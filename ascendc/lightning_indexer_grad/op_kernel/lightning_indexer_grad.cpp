// LightningIndexerGrad as a mixed kernel: the gradient of the selected index scores
// I[t, j] = sum_g w[t,g] relu(q_index[t,g] . key_index[j]) with respect to query_index,
// key_index and weights, given dI = d_values[t, 0, slot] (float32). The AIVs gather and do the
// element-wise work, the AIC of each core multiplies (high-level Matmul, float32 accumulation of
// 16-bit operands). The backward half of SparseLightningIndexerGradKLLoss, shared with it in
// common/indexer_grad_kernel_common.h:
//   row pass (query tokens t, tiling.rowStart): the visible selected key_index rows of t (slot
//     order; -1, out-of-range and hidden slots skipped, their d_values never read) and their dI
//     are gathered; Sx = q_index Kiᵀ (AIC); d_weights and dS = dI w [Sx > 0] (AIV);
//     d_query_index = dS Ki (AIC);
//   key pass (tiling.keyBlockStart): d_key_index by key-block ownership, summed by one core per
//     block in an order the shape fixes (same bits for any core count and execution order).
// Both passes read only inputs and write disjoint outputs: no SyncAll. Compressed keys (cmp_ratio,
// cmp_residual_k; docs/contract.md section 9.1) change only which slots are visible (the geometry's LimitOf).
#include <type_traits>

#include "kernel_operator.h"
#include "lib/matmul_intf.h"

#include "../../common/indexer_grad_kernel_common.h"
#include "../lightning_indexer_grad_tiling.h"

namespace mgo::kernel {

using mgo::tiling::LigTilingData;

struct LigGradIo {
  // One per line: GM_ADDR is the macro `__gm__ uint8_t*`, so `GM_ADDR a, b;` makes only a a pointer.
  GM_ADDR query_index;
  GM_ADDR key_index;
  GM_ADDR weights;
  GM_ADDR indices;
  GM_ADDR d_values;
  GM_ADDR lens_q;
  GM_ADDR lens_k;
  GM_ADDR cmp_residual_k;
  GM_ADDR d_query_index;
  GM_ADDR d_key_index;
  GM_ADDR d_weights;
  GM_ADDR workspace;
};

// T: query_index/key_index dtype (half or bfloat16_t); W: weights and d_weights (T or float).
template <typename T, typename W>
class LightningIndexerGradKernel {
  using Core = IndexerGradCore<T, W, LigTilingData>;

 public:
  __aicore__ inline void Run(const LigGradIo& io, const LigTilingData& t) {
    t_ = t;
    const TCubeTiling nt = ToCubeTiling(t.mmNT);
    const TCubeTiling nn = ToCubeTiling(t.mmNN);
    const TCubeTiling tn = ToCubeTiling(t.mmTN);
    REGIST_MATMUL_OBJ(&pipe_, GetSysWorkSpacePtr(), mmNT_, &nt, mmNN_, &nn, mmTN_, &tn);
    if ASCEND_IS_AIC {
      return;
    }
    geo_.Init(IndexerGeometry(t.layout, t.sparseMode, t.batch, t.s1, t.s2, t.t1, t.t2, 1), io.lens_q, io.lens_k);
    geo_.InitCmp(static_cast<uint32_t>(t.attrs.cmp_ratio), t.cmpResidual != 0 ? io.cmp_residual_k : nullptr);
    dvGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(io.d_values), uint64_t{t.t1} * t.k);
    InitUb();
    const typename Core::Io core_io{io.query_index, io.key_index, io.weights, io.indices, io.d_query_index,
                                    io.d_key_index, io.d_weights, dvGm_};
    GM_ADDR ws = GetUserWorkspace(io.workspace) + static_cast<uint64_t>(GetBlockIdx()) * t.aivWsBytes;
    core_.Init(t, core_io, ws, ub_, &geo_, &mmNT_, &mmNN_, &mmTN_);
    const auto aiv = static_cast<uint32_t>(GetBlockIdx());
    for (uint32_t row = t.rowStart[aiv]; row < t.rowStart[aiv + 1]; ++row) QueryRow(row);
    for (uint32_t u = t.keyBlockStart[aiv]; u < t.keyBlockStart[aiv + 1]; ++u) core_.KeyBlock(u);
    mmNT_.End();
    mmNN_.End();
    mmTN_.End();
  }

 private:
  // Allocates exactly the buffers PlanLigUb counts.
  __aicore__ inline void InitUb() {
    bufs_.Init(pipe_, mgo::tiling::PlanLigUb(t_, std::is_same_v<W, float>));
    ub_ = bufs_.template View<T, W>(0, 1, 2, 0, 1);
  }

  // Token t: gather its visible key_index rows and their dI (by column), then the shared row
  // gradients; a token without a visible key gets zero d_weights and d_query_index rows.
  __aicore__ inline void QueryRow(uint32_t t) {
    const SfaRow r = geo_.Row(t);
    core_.LoadWeights(t, ub_.w);
    const uint64_t slots = uint64_t{t} * t_.k;
    const uint32_t n = core_.GatherKeyIndexRows(
        t, r, [&](uint32_t slot, uint64_t, uint32_t col) { ub_.di.SetValue(col, dvGm_.GetValue(slots + slot)); });
    if (n == 0) {
      core_.EmptyRow(t);
      return;
    }
    SyncPipes<HardEvent::S_V>();  // dI was written by the scalar unit
    core_.Scores(t, n);
    core_.RowGrads(t, n);
  }

  LigTilingData t_{};
  TPipe pipe_;
  typename Core::MmNT mmNT_;
  typename Core::MmNN mmNN_;
  typename Core::MmTN mmTN_;
  SfaGeometry geo_;
  Core core_;
  typename Core::Ub ub_{};
  IndexerGradUbBufs<mgo::tiling::LigUbPlan> bufs_;
  GlobalTensor<float> dvGm_;
};

}  // namespace mgo::kernel

// Argument order: inputs (absent optional inputs are null), outputs, workspace, tiling. cmp_residual_k is
// read only where the tiling says it is given and cmp_ratio > 1 (at ratio 1 every residual is 0).
extern "C" __global__ __aicore__ void lightning_indexer_grad(GM_ADDR query_index, GM_ADDR key_index, GM_ADDR weights,
                                                             GM_ADDR sparse_indices, GM_ADDR d_values,
                                                             GM_ADDR actual_seq_lengths_query,
                                                             GM_ADDR actual_seq_lengths_key,
                                                             GM_ADDR cmp_residual_k, GM_ADDR d_query_index,
                                                             GM_ADDR d_key_index, GM_ADDR d_weights,
                                                             GM_ADDR workspace, GM_ADDR tiling) {
  using mgo::tiling::DType;
  using mgo::tiling::LightningIndexerGradTilingKey;
  AscendC::SetSysWorkspace(workspace);
  REGISTER_TILING_DEFAULT(mgo::tiling::LigTilingData);
  GET_TILING_DATA(tiling_data, tiling);
  const mgo::kernel::LigGradIo io{query_index,   key_index,   weights,   sparse_indices, d_values, actual_seq_lengths_query,
                                  actual_seq_lengths_key, cmp_residual_k, d_query_index, d_key_index, d_weights, workspace};
  if (TILING_KEY_IS(LightningIndexerGradTilingKey(DType::kFloat16, false))) {
    mgo::kernel::LightningIndexerGradKernel<half, half> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(LightningIndexerGradTilingKey(DType::kFloat16, true))) {
    mgo::kernel::LightningIndexerGradKernel<half, float> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(LightningIndexerGradTilingKey(DType::kBFloat16, false))) {
    mgo::kernel::LightningIndexerGradKernel<bfloat16_t, bfloat16_t> op;
    op.Run(io, tiling_data);
  } else if (TILING_KEY_IS(LightningIndexerGradTilingKey(DType::kBFloat16, true))) {
    mgo::kernel::LightningIndexerGradKernel<bfloat16_t, float> op;
    op.Run(io, tiling_data);
  }
}
