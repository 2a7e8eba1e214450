// ClaGateMerge: what the op_host of ClaGateMerge does that the table cannot say, Infer and Tile
// over the rules in infer_shape/cla_gate_merge.h and ascendc/cla_gate_merge/cla_gate_merge_tiling.h;
// the OpDef is generated into cla_gate_merge_def.h. Run by the shared adapter
// (common/op_host_adapter.h), tested on CPU. CANN-only, NOT compiled in this repository's CI (no
// CANN toolkit here); scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../../infer_shape/cla_gate_merge.h"
#include "../cla_gate_merge_tiling.h"

namespace mgo::op_host {

struct ClaGateMergeHost {
  using T = mgo::table::ClaGateMerge;
  static mgo::infer::InferResult Infer(const std::vector<mgo::infer::TensorDesc>& in, const T::Attrs& a) {
    return mgo::infer::cla_gate_merge(in, a);
  }
  // global_attn [T, N, D]. A vector-only kernel sized from the platform UB.
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const T::Attrs&,
                   const Platform& p) {
    const mgo::infer::TensorDesc& x = in[T::In::kGlobalAttn];
    const mgo::tiling::ClaGateShape shape{Dim(x, 0), Dim(x, 1), Dim(x, 2)};
    const auto t = mgo::tiling::ComputeClaGateMergeTiling(shape, dtype, p.aivNum, p.ubBytes);
    return Plan(t, t.result.data.usedCoreNum);
  }
};

}  // namespace mgo::op_host

#include "cla_gate_merge_def.h"  // the OpDef, generated from the table
