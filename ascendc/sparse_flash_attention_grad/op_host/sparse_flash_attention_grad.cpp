// SparseFlashAttentionGrad: what its op_host does that the table cannot say, Infer and Tile over
// the rules in infer_shape/sparse_flash_attention_grad.h and the pure tiling in
// ascendc/sparse_flash_attention_grad/sparse_flash_attention_grad_tiling.h; the OpDef is generated
// into sparse_flash_attention_grad_def.h. Run by the shared adapter
// (common/op_host_adapter.h), tested on CPU. CANN-only, NOT compiled with CANN in this
// repository's CI (no CANN toolkit here); scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../common/op_host_sfa.h"
#include "../../../infer_shape/sparse_flash_attention_grad.h"
#include "../sparse_flash_attention_grad_tiling.h"

namespace mgo::op_host {

// Optional inputs may be omitted or be the zero-size placeholder; the gradient of an absent one is
// empty. Cumulative lengths (TND, int32 or int64, both the same) stay a device tensor.
struct SparseFlashAttentionGradHost {
  using T = mgo::table::SparseFlashAttentionGrad;
  static mgo::infer::InferResult Infer(const std::vector<mgo::infer::TensorDesc>& in, const T::Attrs& a) {
    mgo::infer::InferResult r = mgo::infer::sparse_flash_attention_grad(in, a);
    // An omitted value/rope input has an empty gradient; its dtype is the float slots' dtype,
    // query's, as for the placeholder the Python layer passes.
    for (auto& t : r.dtypes) {
      if (t == mgo::infer::DType::kUnknown) t = in[T::In::kQuery].dtype;
    }
    return r;
  }
  // The key pass waits for every core's row pass (SyncAll): all cores must start together.
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const T::Attrs& a,
                   const Platform& p) {
    return TileSfa<T>(mgo::tiling::ComputeSparseFlashAttentionGradTiling, in, dtype, a, p, /*all_cores_at_once=*/true);
  }
};

}  // namespace mgo::op_host

#include "sparse_flash_attention_grad_def.h"  // the OpDef, generated from the table
