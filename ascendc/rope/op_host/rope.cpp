// Rope (forward): what the op_host of Rope does that the table cannot say, Infer and Tile over the
// rules in infer_shape/rope.h and ascendc/rope/rope_tiling.h; the OpDef is generated
// into rope_def.h. Run by the shared adapter (common/op_host_adapter.h), tested on
// CPU. CANN-only, NOT compiled in this repository's CI (no CANN toolkit here);
// scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../../infer_shape/rope.h"
#include "../rope_tiling.h"

namespace mgo::op_host {

struct RopeHost {
  using T = mgo::table::Rope;
  static mgo::infer::InferResult Infer(const std::vector<mgo::infer::TensorDesc>& in, const T::Attrs& a) {
    return mgo::infer::rope(in, a);
  }
  // q [n_tokens, hidden], cos [max_seq_len, 128], q_seq_len [batch]: the lengths are a device
  // tensor, not an attribute, so new lengths need no recompilation.
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const T::Attrs&,
                   const Platform& p) {
    const mgo::tiling::RopeShape shape{Dim(in[T::In::kQ], 0), Dim(in[T::In::kQ], 1), Dim(in[T::In::kCos], 0),
                                       Dim(in[T::In::kQSeqLen], 0)};
    const auto t = mgo::tiling::ComputeRopeTiling(shape, dtype, p.aivNum, p.ubBytes);
    return Plan(t, t.result.data.usedCoreNum);
  }
};

}  // namespace mgo::op_host

#include "rope_def.h"  // the OpDef, generated from the table
