// RopeGrad on the AI Core vector unit; the body lives in common/rope_kernel.h.
#include "kernel_operator.h"

#include "../../common/rope_kernel.h"
#include "../rope_grad_tiling.h"

// Argument order: inputs, outputs, workspace, tiling (the CANN kernel convention).
extern "C" __global__ __aicore__ void rope_grad(GM_ADDR q_grad, GM_ADDR k_grad, GM_ADDR cos, GM_ADDR sin,
                                                GM_ADDR q_seq_len, GM_ADDR q_grad_out, GM_ADDR k_grad_out,
                                                GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  using mgo::kernel::RopeVariant;
  using mgo::tiling::DType;
  using mgo::table::Mode;
  using mgo::tiling::RopeGradTilingKey;
  REGISTER_TILING_DEFAULT(mgo::tiling::RopeTilingData);
  GET_TILING_DATA(tiling_data, tiling);
  if (TILING_KEY_IS(RopeGradTilingKey(DType::kFloat16, Mode::kAtb))) {
    mgo::kernel::RunRope<half, RopeVariant::kGradAtb>(q_grad, k_grad, cos, sin, q_seq_len, q_grad_out,
                                                      k_grad_out, tiling_data);
  } else if (TILING_KEY_IS(RopeGradTilingKey(DType::kBFloat16, Mode::kAtb))) {
    mgo::kernel::RunRope<bfloat16_t, RopeVariant::kGradAtb>(q_grad, k_grad, cos, sin, q_seq_len, q_grad_out,
                                                            k_grad_out, tiling_data);
  } else if (TILING_KEY_IS(RopeGradTilingKey(DType::kFloat16, Mode::kVjp))) {
    mgo::kernel::RunRope<half, RopeVariant::kGradVjp>(q_grad, k_grad, cos, sin, q_seq_len, q_grad_out,
                                                      k_grad_out, tiling_data);
  } else if (TILING_KEY_IS(RopeGradTilingKey(DType::kBFloat16, Mode::kVjp))) {
    mgo::kernel::RunRope<bfloat16_t, RopeVariant::kGradVjp>(q_grad, k_grad, cos, sin, q_seq_len, q_grad_out,
                                                            k_grad_out, tiling_data);
  }
}
