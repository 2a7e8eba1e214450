// SparseFlashAttentionGrad: what its op_host does that the table cannot say,
// SparseFlashAttentionGradHost: Tile over the pure tiling in
// ascendc/sparse_flash_attention_grad/sparse_flash_attention_grad_tiling.h and wraps the rule's
// dtypes. The shape rule (infer_shape/sparse_flash_attention_grad.h) and the OpDef come from the
// table: SparseFlashAttentionGradDef in common/op_host_table.h, sparse_flash_attention_grad_def.h.
// Run by the shared adapter (common/op_host_adapter.h), tested on CPU. CANN-only, NOT compiled with
// CANN in this repository's CI (no CANN toolkit here); scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../common/op_host_sfa.h"
#include "../../common/op_host_table.h"
#include "../sparse_flash_attention_grad_tiling.h"

namespace mgo::op_host {

// Optional inputs may be omitted or be the zero-size placeholder; the gradient of an absent one is
// empty. Lengths (TND cumulative, BSND per batch; int32 or int64) stay a device tensor.
struct SparseFlashAttentionGradHost : SparseFlashAttentionGradDef {
  static mgo::infer::InferResult Infer(const std::vector<mgo::infer::TensorDesc>& in, const Table::Attrs& a) {
    mgo::infer::InferResult r = SparseFlashAttentionGradDef::Infer(in, a);
    // An omitted value/rope input has an empty gradient; its dtype is the float slots' dtype,
    // query's, as for the placeholder the Python layer passes.
    for (auto& t : r.dtypes) {
      if (t == mgo::infer::DType::kUnknown) t = in[Table::In::kQuery].dtype;
    }
    return r;
  }
  // The key pass waits for every core's row pass (SyncAll): all cores must start together.
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const Table::Attrs& a,
                   const Platform& p) {
    return TileSfa<Table>(mgo::tiling::ComputeSparseFlashAttentionGradTiling, in, dtype, a, p,
                          /*all_cores_at_once=*/true);
  }
};

}  // namespace mgo::op_host

#include "sparse_flash_attention_grad_def.h"  // the OpDef, generated from the table
