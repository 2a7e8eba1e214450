// RopeGrad: what its op_host does that the table cannot say, RopeGradHost: Tile over the pure
// tiling in ascendc/rope_grad/rope_grad_tiling.h. The shape rule (infer_shape/rope_grad.h) and the
// OpDef come from the table: RopeGradDef in common/op_host_table.h, rope_grad_def.h. Run by the
// shared adapter (common/op_host_adapter.h), tested on CPU. CANN-only, NOT compiled with CANN in
// this repository's CI (no CANN toolkit here); scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../common/op_host_table.h"
#include "../rope_grad_tiling.h"

namespace mgo::op_host {

struct RopeGradHost : RopeGradDef {
  // q_grad [n_tokens, hidden], cos [max_seq_len, 128], q_seq_len [batch]: the lengths are a
  // device tensor, not an attribute, so new lengths need no recompilation.
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const Table::Attrs& a,
                   const Platform& p) {
    const mgo::tiling::RopeShape shape{Dim(in[Table::In::kQGrad], 0), Dim(in[Table::In::kQGrad], 1),
                                       Dim(in[Table::In::kCos], 0), Dim(in[Table::In::kQSeqLen], 0)};
    const auto t = mgo::tiling::ComputeRopeGradTiling(shape, dtype, a.mode, p.aivNum, p.ubBytes);
    return Plan(t, t.result.data.usedCoreNum);
  }
};

}  // namespace mgo::op_host

#include "rope_grad_def.h"  // the OpDef, generated from the table
