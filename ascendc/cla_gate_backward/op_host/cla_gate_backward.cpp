// ClaGateBackward: what its op_host does that the table cannot say, ClaGateBackwardHost: Tile over
// the pure tiling in ascendc/cla_gate_backward/cla_gate_backward_tiling.h. The shape rule
// (infer_shape/cla_gate_backward.h) and the OpDef come from the table: ClaGateBackwardDef in
// common/op_host_table.h, cla_gate_backward_def.h. Run by the shared adapter
// (common/op_host_adapter.h), tested on CPU. CANN-only, NOT compiled with CANN in this repository's
// CI (no CANN toolkit here); scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../common/op_host_table.h"
#include "../cla_gate_backward_tiling.h"

namespace mgo::op_host {

struct ClaGateBackwardHost : ClaGateBackwardDef {
  // grad_merged [T, N, D]. The seed op ships for Ascend 950 only; this kernel uses only the vector
  // API subset common to A2/A3/950 and sizes its tiles from the platform's UB.
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const Table::Attrs&,
                   const Platform& p) {
    const mgo::infer::TensorDesc& x = in[Table::In::kGradMerged];
    const mgo::tiling::ClaGateShape shape{Dim(x, 0), Dim(x, 1), Dim(x, 2)};
    const auto t = mgo::tiling::ComputeClaGateBackwardTiling(shape, dtype, p.aivNum, p.ubBytes);
    return Plan(t, t.result.data.usedCoreNum);
  }
};

}  // namespace mgo::op_host

#include "cla_gate_backward_def.h"  // the OpDef, generated from the table
