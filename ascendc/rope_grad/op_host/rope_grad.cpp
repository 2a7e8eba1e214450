// RopeGrad: what the op_host of RopeGrad does that the table cannot say, Infer and Tile over the
// rules in infer_shape/rope_grad.h and ascendc/rope_grad/rope_grad_tiling.h; the OpDef is generated
// into rope_grad_def.h. Run by the shared adapter
// (common/op_host_adapter.h), tested on CPU. CANN-only, NOT compiled in this repository's CI (no
// CANN toolkit here); scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../../infer_shape/rope_grad.h"
#include "../rope_grad_tiling.h"

namespace mgo::op_host {

struct RopeGradHost {
  using T = mgo::table::RopeGrad;
  static mgo::infer::InferResult Infer(const std::vector<mgo::infer::TensorDesc>& in, const T::Attrs& a) {
    return mgo::infer::rope_grad(in, a);
  }
  // q_grad [n_tokens, hidden], cos [max_seq_len, 128], q_seq_len [batch]: the lengths are a
  // device tensor, not an attribute, so new lengths need no recompilation.
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const T::Attrs& a,
                   const Platform& p) {
    const mgo::tiling::RopeShape shape{Dim(in[T::In::kQGrad], 0), Dim(in[T::In::kQGrad], 1),
                                       Dim(in[T::In::kCos], 0), Dim(in[T::In::kQSeqLen], 0)};
    const auto mode = a.mode == "vjp" ? mgo::tiling::RopeGradMode::kVjp : mgo::tiling::RopeGradMode::kAtb;
    const auto t = mgo::tiling::ComputeRopeGradTiling(shape, dtype, mode, p.aivNum, p.ubBytes);
    return Plan(t, t.result.data.usedCoreNum);
  }
};

}  // namespace mgo::op_host

#include "rope_grad_def.h"  // the OpDef, generated from the table
