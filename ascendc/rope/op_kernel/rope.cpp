// Rope (forward) on the AI Core vector unit; the body lives in common/rope_kernel.h.
#include "kernel_operator.h"

#include "../../common/rope_kernel.h"
#include "../rope_tiling.h"

// Argument order: inputs, outputs, workspace, tiling (the CANN kernel convention).
extern "C" __global__ __aicore__ void rope(GM_ADDR q, GM_ADDR k, GM_ADDR cos, GM_ADDR sin, GM_ADDR q_seq_len,
                                           GM_ADDR q_embed, GM_ADDR k_embed, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  using mgo::kernel::RopeVariant;
  using mgo::tiling::DType;
  REGISTER_TILING_DEFAULT(mgo::tiling::RopeTilingData);
  GET_TILING_DATA(tiling_data, tiling);
  if (TILING_KEY_IS(mgo::tiling::RopeTilingKey(DType::kFloat16))) {
    mgo::kernel::RunRope<half, RopeVariant::kForward>(q, k, cos, sin, q_seq_len, q_embed, k_embed, tiling_data);
  } else if (TILING_KEY_IS(mgo::tiling::RopeTilingKey(DType::kBFloat16))) {
    mgo::kernel::RunRope<bfloat16_t, RopeVariant::kForward>(q, k, cos, sin, q_seq_len, q_embed, k_embed,
                                                            tiling_data);
  }
}
