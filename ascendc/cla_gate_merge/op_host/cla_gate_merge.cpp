// ClaGateMerge: what its op_host does that the table cannot say, ClaGateMergeHost: Tile over the
// pure tiling in ascendc/cla_gate_merge/cla_gate_merge_tiling.h. The shape rule
// (infer_shape/cla_gate_merge.h) and the OpDef come from the table: ClaGateMergeDef in
// common/op_host_table.h, cla_gate_merge_def.h. Run by the shared adapter
// (common/op_host_adapter.h), tested on CPU. CANN-only, NOT compiled with CANN in this repository's
// CI (no CANN toolkit here); scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../common/op_host_table.h"
#include "../cla_gate_merge_tiling.h"

namespace mgo::op_host {

struct ClaGateMergeHost : ClaGateMergeDef {
  // global_attn [T, N, D]. A vector-only kernel sized from the platform UB.
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const Table::Attrs&,
                   const Platform& p) {
    const mgo::infer::TensorDesc& x = in[Table::In::kGlobalAttn];
    const mgo::tiling::ClaGateShape shape{Dim(x, 0), Dim(x, 1), Dim(x, 2)};
    const auto t = mgo::tiling::ComputeClaGateMergeTiling(shape, dtype, p.aivNum, p.ubBytes);
    return Plan(t, t.result.data.usedCoreNum);
  }
};

}  // namespace mgo::op_host

#include "cla_gate_merge_def.h"  // the OpDef, generated from the table
