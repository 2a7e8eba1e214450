// ClaGateMerge on the AI Core vector unit: merged = sigmoid(z_g) * O_g + sigmoid(z_l) * O_l,
// the gates broadcast over D. Same row split and double-buffered tiles as ClaGateBackward.
#include "kernel_operator.h"

#include "../../common/kernel_helpers.h"
#include "../cla_gate_merge_tiling.h"

namespace mgo::kernel {

using namespace AscendC;
using mgo::tiling::ClaGateTilingData;

template <typename T>
class ClaGateMergeKernel {
 public:
  __aicore__ inline void Init(GM_ADDR global_attn, GM_ADDR local_attn, GM_ADDR global_logits,
                              GM_ADDR local_logits, GM_ADDR merged, const ClaGateTilingData& t) {
    t_ = t;
    range_ = mgo::tiling::CoreRows(t.rowsPerCore, t.rowsRemainder, static_cast<uint64_t>(GetBlockIdx()));
    const uint64_t d = t.headDim;
    ogGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(global_attn) + range_.start * d, range_.count * d);
    olGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(local_attn) + range_.start * d, range_.count * d);
    zgGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(global_logits) + range_.start, range_.count);
    zlGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(local_logits) + range_.start, range_.count);
    outGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(merged) + range_.start * d, range_.count * d);

    const auto plan = mgo::tiling::PlanClaGateUb(t.tileRows, t.headDim);
    constexpr uint8_t kDepth = mgo::tiling::ClaGateUbPlan::kQueueDepth;
    pipe_.InitBuffer(ogQue_, kDepth, plan.ioBytes);
    pipe_.InitBuffer(olQue_, kDepth, plan.ioBytes);
    pipe_.InitBuffer(zQue_, kDepth, plan.gateIoBytes);
    pipe_.InitBuffer(outQue_, kDepth, plan.ioBytes);
    pipe_.InitBuffer(ogF_, plan.rowsF32Bytes);
    pipe_.InitBuffer(olF_, plan.rowsF32Bytes);
    pipe_.InitBuffer(sF_, plan.gateF32Bytes);
    pipe_.InitBuffer(auxF_, plan.gateF32Bytes);
  }

  __aicore__ inline void Process() {
    ForEachTile(range_.count, t_.tileRows, [this](uint64_t done, uint32_t rows) {
      CopyIn(done, rows);
      Compute(rows);
      CopyOut(done, rows);
    });
  }

 private:
  __aicore__ inline DataCopyExtParams GateRow(uint32_t rows) const {
    return DataCopyExtParams{1, static_cast<uint32_t>(rows * sizeof(T)), 0, 0, 0};
  }

  __aicore__ inline void CopyIn(uint64_t done, uint32_t rows) {
    const uint64_t off = done * t_.headDim;
    const uint32_t n = rows * t_.headDim;
    LocalTensor<T> og = ogQue_.template AllocTensor<T>();
    LocalTensor<T> ol = olQue_.template AllocTensor<T>();
    LocalTensor<T> z = zQue_.template AllocTensor<T>();
    DataCopy(og, ogGm_[off], n);
    DataCopy(ol, olGm_[off], n);
    const DataCopyPadExtParams<T> no_pad{false, 0, 0, T(0.0f)};
    DataCopyPad(z, zgGm_[done], GateRow(rows), no_pad);
    DataCopyPad(z[t_.gateStride], zlGm_[done], GateRow(rows), no_pad);
    ogQue_.EnQue(og);
    olQue_.EnQue(ol);
    zQue_.EnQue(z);
  }

  __aicore__ inline void Compute(uint32_t rows) {
    const uint32_t d = t_.headDim;
    const uint32_t n = rows * d;
    const uint32_t gates = 2 * t_.gateStride;
    const LocalTensor<float> ogF = ogF_.Get<float>();
    const LocalTensor<float> olF = olF_.Get<float>();
    const LocalTensor<float> s = sF_.Get<float>();
    const LocalTensor<float> aux = auxF_.Get<float>();

    LocalTensor<T> og = ogQue_.template DeQue<T>();
    LocalTensor<T> ol = olQue_.template DeQue<T>();
    LocalTensor<T> z = zQue_.template DeQue<T>();
    Cast(ogF, og, RoundMode::CAST_NONE, n);
    Cast(olF, ol, RoundMode::CAST_NONE, n);
    Cast(s, z, RoundMode::CAST_NONE, gates);
    ogQue_.FreeTensor(og);
    olQue_.FreeTensor(ol);
    zQue_.FreeTensor(z);

    SigmoidInPlace(s, aux, gates);
    SyncPipes<HardEvent::V_S>();  // the row loop reads the gates as scalars
    for (uint32_t r = 0; r < rows; ++r) {
      const float sg = s.GetValue(r);
      const float sl = s.GetValue(t_.gateStride + r);
      const uint32_t row = r * d;
      Muls(ogF[row], ogF[row], sg, d);
      Muls(olF[row], olF[row], sl, d);
      Add(ogF[row], ogF[row], olF[row], d);
    }

    LocalTensor<T> out = outQue_.template AllocTensor<T>();
    Cast(out, ogF, RoundMode::CAST_RINT, n);
    outQue_.EnQue(out);
  }

  __aicore__ inline void CopyOut(uint64_t done, uint32_t rows) {
    LocalTensor<T> out = outQue_.template DeQue<T>();
    DataCopy(outGm_[done * t_.headDim], out, rows * t_.headDim);
    outQue_.FreeTensor(out);
  }

  ClaGateTilingData t_{};
  mgo::tiling::RowRange range_{};
  TPipe pipe_;
  TQue<QuePosition::VECIN, 2> ogQue_, olQue_, zQue_;
  TQue<QuePosition::VECOUT, 2> outQue_;
  TBuf<TPosition::VECCALC> ogF_, olF_, sF_, auxF_;
  GlobalTensor<T> ogGm_, olGm_, zgGm_, zlGm_, outGm_;
};

template <typename T>
__aicore__ inline void RunClaGateMerge(GM_ADDR og, GM_ADDR ol, GM_ADDR zg, GM_ADDR zl, GM_ADDR merged,
                                       const ClaGateTilingData& t) {
  ClaGateMergeKernel<T> op;
  op.Init(og, ol, zg, zl, merged, t);
  op.Process();
}

}  // namespace mgo::kernel

// Argument order: inputs, outputs, workspace, tiling (the CANN kernel convention).
extern "C" __global__ __aicore__ void cla_gate_merge(GM_ADDR global_attn, GM_ADDR local_attn,
                                                     GM_ADDR global_gate_logits, GM_ADDR local_gate_logits,
                                                     GM_ADDR merged, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  REGISTER_TILING_DEFAULT(mgo::tiling::ClaGateTilingData);
  GET_TILING_DATA(tiling_data, tiling);
  if (TILING_KEY_IS(0)) {
    mgo::kernel::RunClaGateMerge<half>(global_attn, local_attn, global_gate_logits, local_gate_logits, merged,
                                       tiling_data);
  } else if (TILING_KEY_IS(1)) {
    mgo::kernel::RunClaGateMerge<bfloat16_t>(global_attn, local_attn, global_gate_logits, local_gate_logits,
                                             merged, tiling_data);
  }
}
