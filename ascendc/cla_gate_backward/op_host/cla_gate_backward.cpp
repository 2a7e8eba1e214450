// ClaGateBackward: what the op_host of ClaGateBackward does that the table cannot say, Infer and
// Tile over the rules in infer_shape/cla_gate_backward.h and
// ascendc/cla_gate_backward/cla_gate_backward_tiling.h; the OpDef is
// generated into cla_gate_backward_def.h. Run by the shared adapter (common/op_host_adapter.h),
// tested on CPU. CANN-only, NOT compiled in this repository's CI (no CANN toolkit here);
// scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../../infer_shape/cla_gate_backward.h"
#include "../cla_gate_backward_tiling.h"

namespace mgo::op_host {

struct ClaGateBackwardHost {
  using T = mgo::table::ClaGateBackward;
  static mgo::infer::InferResult Infer(const std::vector<mgo::infer::TensorDesc>& in, const T::Attrs& a) {
    return mgo::infer::cla_gate_backward(in, a);
  }
  // grad_merged [T, N, D]. The seed op ships for Ascend 950 only; this kernel uses only the vector
  // API subset common to A2/A3/950 and sizes its tiles from the platform's UB.
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const T::Attrs&,
                   const Platform& p) {
    const mgo::infer::TensorDesc& x = in[T::In::kGradMerged];
    const mgo::tiling::ClaGateShape shape{Dim(x, 0), Dim(x, 1), Dim(x, 2)};
    const auto t = mgo::tiling::ComputeClaGateBackwardTiling(shape, dtype, p.aivNum, p.ubBytes);
    return Plan(t, t.result.data.usedCoreNum);
  }
};

}  // namespace mgo::op_host

#include "cla_gate_backward_def.h"  // the OpDef, generated from the table
