// ClaGateBackward on the AI Core vector unit.
// Rows are (token, head) pairs; each core owns a contiguous run of rows (see CoreRows) and
// walks it in tiles of tileRows rows: copy in (G, O_g, O_l, z_g, z_l) -> compute in float32 ->
// copy out (dO_g, dO_l, dz_g, dz_l). Every queue holds two buffers, so the copy of tile i+1
// overlaps the compute of tile i.
//   s = sigmoid(z); dO = G * s; dz = (sum_d G * O) * s * (1 - s), the slope as s * sigmoid(-z)
#include "kernel_operator.h"

#include "../../common/kernel_helpers.h"
#include "../cla_gate_backward_tiling.h"

namespace mgo::kernel {

using namespace AscendC;
using mgo::tiling::ClaGateTilingData;

template <typename T>
class ClaGateBackwardKernel {
 public:
  __aicore__ inline void Init(GM_ADDR grad, GM_ADDR global_attn, GM_ADDR local_attn, GM_ADDR global_logits,
                              GM_ADDR local_logits, GM_ADDR d_global_attn, GM_ADDR d_local_attn,
                              GM_ADDR d_global_logits, GM_ADDR d_local_logits, const ClaGateTilingData& t) {
    t_ = t;
    range_ = mgo::tiling::CoreRows(t.rowsPerCore, t.rowsRemainder, static_cast<uint64_t>(GetBlockIdx()));
    const uint64_t d = t.headDim;
    gGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(grad) + range_.start * d, range_.count * d);
    ogGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(global_attn) + range_.start * d, range_.count * d);
    olGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(local_attn) + range_.start * d, range_.count * d);
    zgGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(global_logits) + range_.start, range_.count);
    zlGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(local_logits) + range_.start, range_.count);
    dogGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(d_global_attn) + range_.start * d, range_.count * d);
    dolGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(d_local_attn) + range_.start * d, range_.count * d);
    dzgGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(d_global_logits) + range_.start, range_.count);
    dzlGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(d_local_logits) + range_.start, range_.count);

    const auto plan = mgo::tiling::PlanClaGateUb(t.tileRows, t.headDim);
    constexpr uint8_t kDepth = mgo::tiling::ClaGateUbPlan::kQueueDepth;
    pipe_.InitBuffer(gQue_, kDepth, plan.ioBytes);
    pipe_.InitBuffer(ogQue_, kDepth, plan.ioBytes);
    pipe_.InitBuffer(olQue_, kDepth, plan.ioBytes);
    pipe_.InitBuffer(zQue_, kDepth, plan.gateIoBytes);
    pipe_.InitBuffer(dogQue_, kDepth, plan.ioBytes);
    pipe_.InitBuffer(dolQue_, kDepth, plan.ioBytes);
    pipe_.InitBuffer(dzQue_, kDepth, plan.gateIoBytes);
    pipe_.InitBuffer(gF_, plan.rowsF32Bytes);
    pipe_.InitBuffer(ogF_, plan.rowsF32Bytes);
    pipe_.InitBuffer(olF_, plan.rowsF32Bytes);
    pipe_.InitBuffer(sF_, plan.gateF32Bytes);
    pipe_.InitBuffer(sumF_, plan.gateF32Bytes);
    pipe_.InitBuffer(auxF_, plan.gateF32Bytes);
    pipe_.InitBuffer(prod_, plan.prodBytes);
    pipe_.InitBuffer(red_, plan.redBytes);
    pipe_.InitBuffer(work_, plan.workBytes);
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
    LocalTensor<T> g = gQue_.template AllocTensor<T>();
    LocalTensor<T> og = ogQue_.template AllocTensor<T>();
    LocalTensor<T> ol = olQue_.template AllocTensor<T>();
    LocalTensor<T> z = zQue_.template AllocTensor<T>();
    DataCopy(g, gGm_[off], n);
    DataCopy(og, ogGm_[off], n);
    DataCopy(ol, olGm_[off], n);
    // Gate rows are `rows` elements: not whole 32-byte blocks in general, hence DataCopyPad.
    const DataCopyPadExtParams<T> no_pad{false, 0, 0, T(0.0f)};
    DataCopyPad(z, zgGm_[done], GateRow(rows), no_pad);
    DataCopyPad(z[t_.gateStride], zlGm_[done], GateRow(rows), no_pad);
    gQue_.EnQue(g);
    ogQue_.EnQue(og);
    olQue_.EnQue(ol);
    zQue_.EnQue(z);
  }

  __aicore__ inline void Compute(uint32_t rows) {
    const uint32_t d = t_.headDim;
    const uint32_t n = rows * d;
    const uint32_t gates = 2 * t_.gateStride;  // both halves, padding included (never stored)
    const LocalTensor<float> gF = gF_.Get<float>();
    const LocalTensor<float> ogF = ogF_.Get<float>();
    const LocalTensor<float> olF = olF_.Get<float>();
    const LocalTensor<float> s = sF_.Get<float>();
    const LocalTensor<float> sums = sumF_.Get<float>();
    const LocalTensor<float> aux = auxF_.Get<float>();
    const LocalTensor<float> prod = prod_.Get<float>();
    const LocalTensor<float> red = red_.Get<float>();
    const LocalTensor<float> work = work_.Get<float>();

    LocalTensor<T> g = gQue_.template DeQue<T>();
    LocalTensor<T> og = ogQue_.template DeQue<T>();
    LocalTensor<T> ol = olQue_.template DeQue<T>();
    LocalTensor<T> z = zQue_.template DeQue<T>();
    Cast(gF, g, RoundMode::CAST_NONE, n);
    Cast(ogF, og, RoundMode::CAST_NONE, n);
    Cast(olF, ol, RoundMode::CAST_NONE, n);
    Cast(s, z, RoundMode::CAST_NONE, gates);
    gQue_.FreeTensor(g);
    ogQue_.FreeTensor(og);
    olQue_.FreeTensor(ol);
    zQue_.FreeTensor(z);

    // The slope s * (1 - s) as s * sigmoid(-z): 1 - s cancels for large z. `sums` is free until
    // the row loop fills it, so it holds sigmoid(-z) meanwhile; aux ends as the slope.
    Muls(sums, s, -1.0f, gates);
    SigmoidInPlace(sums, aux, gates);
    SigmoidInPlace(s, aux, gates);
    Mul(aux, s, sums, gates);
    SyncPipes<HardEvent::V_S>();  // the row loop reads the gates as scalars (and rewrites sums)
    constexpr uint32_t kLocalSlot = 32 / sizeof(float);  // second ReduceSum result, 32B aligned
    for (uint32_t r = 0; r < rows; ++r) {
      const float sg = s.GetValue(r);
      const float sl = s.GetValue(t_.gateStride + r);
      const uint32_t row = r * d;
      Mul(prod, gF[row], ogF[row], d);
      ReduceSum(red, prod, work, d);
      Mul(prod, gF[row], olF[row], d);
      ReduceSum(red[kLocalSlot], prod, work, d);
      // dO rows overwrite the O rows, which this row no longer needs.
      Muls(ogF[row], gF[row], sg, d);
      Muls(olF[row], gF[row], sl, d);
      SyncPipes<HardEvent::V_S>();
      sums.SetValue(r, red.GetValue(0));
      sums.SetValue(t_.gateStride + r, red.GetValue(kLocalSlot));
    }
    SyncPipes<HardEvent::S_V>();  // the scalar-written sums feed vector ops below

    // dz = sums * slope, for both gates at once.
    Mul(aux, aux, sums, gates);

    LocalTensor<T> dog = dogQue_.template AllocTensor<T>();
    LocalTensor<T> dol = dolQue_.template AllocTensor<T>();
    LocalTensor<T> dz = dzQue_.template AllocTensor<T>();
    Cast(dog, ogF, RoundMode::CAST_RINT, n);
    Cast(dol, olF, RoundMode::CAST_RINT, n);
    Cast(dz, aux, RoundMode::CAST_RINT, gates);
    dogQue_.EnQue(dog);
    dolQue_.EnQue(dol);
    dzQue_.EnQue(dz);
  }

  __aicore__ inline void CopyOut(uint64_t done, uint32_t rows) {
    const uint64_t off = done * t_.headDim;
    const uint32_t n = rows * t_.headDim;
    LocalTensor<T> dog = dogQue_.template DeQue<T>();
    LocalTensor<T> dol = dolQue_.template DeQue<T>();
    LocalTensor<T> dz = dzQue_.template DeQue<T>();
    DataCopy(dogGm_[off], dog, n);
    DataCopy(dolGm_[off], dol, n);
    DataCopyPad(dzgGm_[done], dz, GateRow(rows));
    DataCopyPad(dzlGm_[done], dz[t_.gateStride], GateRow(rows));
    dogQue_.FreeTensor(dog);
    dolQue_.FreeTensor(dol);
    dzQue_.FreeTensor(dz);
  }

  ClaGateTilingData t_{};
  mgo::tiling::RowRange range_{};
  TPipe pipe_;
  TQue<QuePosition::VECIN, 2> gQue_, ogQue_, olQue_, zQue_;
  TQue<QuePosition::VECOUT, 2> dogQue_, dolQue_, dzQue_;
  TBuf<TPosition::VECCALC> gF_, ogF_, olF_, sF_, sumF_, auxF_, prod_, red_, work_;
  GlobalTensor<T> gGm_, ogGm_, olGm_, zgGm_, zlGm_, dogGm_, dolGm_, dzgGm_, dzlGm_;
};

template <typename T>
__aicore__ inline void RunClaGateBackward(GM_ADDR grad, GM_ADDR og, GM_ADDR ol, GM_ADDR zg, GM_ADDR zl,
                                          GM_ADDR dog, GM_ADDR dol, GM_ADDR dzg, GM_ADDR dzl,
                                          const ClaGateTilingData& t) {
  ClaGateBackwardKernel<T> op;
  op.Init(grad, og, ol, zg, zl, dog, dol, dzg, dzl, t);
  op.Process();
}

}  // namespace mgo::kernel

// Argument order: inputs, outputs, workspace, tiling (the CANN kernel convention).
extern "C" __global__ __aicore__ void cla_gate_backward(GM_ADDR grad_merged, GM_ADDR global_attn,
                                                        GM_ADDR local_attn, GM_ADDR global_gate_logits,
                                                        GM_ADDR local_gate_logits, GM_ADDR grad_global_attn,
                                                        GM_ADDR grad_local_attn, GM_ADDR grad_global_gate_logits,
                                                        GM_ADDR grad_local_gate_logits, GM_ADDR workspace,
                                                        GM_ADDR tiling) {
  (void)workspace;
  REGISTER_TILING_DEFAULT(mgo::tiling::ClaGateTilingData);
  GET_TILING_DATA(tiling_data, tiling);
  if (TILING_KEY_IS(0)) {
    mgo::kernel::RunClaGateBackward<half>(grad_merged, global_attn, local_attn, global_gate_logits,
                                          local_gate_logits, grad_global_attn, grad_local_attn,
                                          grad_global_gate_logits, grad_local_gate_logits, tiling_data);
  } else if (TILING_KEY_IS(1)) {
    mgo::kernel::RunClaGateBackward<bfloat16_t>(grad_merged, global_attn, local_attn, global_gate_logits,
                                                local_gate_logits, grad_global_attn, grad_local_attn,
                                                grad_global_gate_logits, grad_local_gate_logits, tiling_data);
  }
}
