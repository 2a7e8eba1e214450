// SparseFlashMlaGrad: what its op_host does that the table cannot say, SparseFlashMlaGradHost: Tile over the
// pure tiling in ascendc/sparse_flash_mla_grad/sparse_flash_mla_grad_tiling.h and the dtypes of absent
// outputs. The shape rule (infer_shape/sparse_flash_mla_grad.h) and the OpDef come from the table:
// SparseFlashMlaGradDef in common/op_host_table.h, sparse_flash_mla_grad_def.h. Run by the shared adapter
// (common/op_host_adapter.h), tested on CPU. CANN-only, NOT compiled with CANN in this repository's CI (no
// CANN toolkit here); scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../common/op_host_smla.h"
#include "../../common/op_host_table.h"
#include "../sparse_flash_mla_grad_tiling.h"

namespace mgo::op_host {

// Optional inputs may be omitted or be the zero-size placeholder; the gradient of an absent cmp_kv and the
// norm of absent indices are empty.
struct SparseFlashMlaGradHost : SparseFlashMlaGradDef {
  static mgo::infer::InferResult Infer(const std::vector<mgo::infer::TensorDesc>& in, const Table::Attrs& a) {
    mgo::infer::InferResult r = SparseFlashMlaGradDef::Infer(in, a);
    // An omitted cmp_kv has an empty gradient of query's dtype, as for the placeholder the Python layer passes.
    for (auto& t : r.dtypes) {
      if (t == mgo::infer::DType::kUnknown) t = in[Table::In::kQuery].dtype;
    }
    return r;
  }

  // The pure tiling's view of the shapes is the forward's (op_host_smla.h). The lengths' values live on the
  // device (the kernel reads them), so rows are balanced by count. The key pass waits for every core's row pass
  // (SyncAll): all cores must start together.
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const Table::Attrs& a,
                   const Platform& p) {
    const auto t = mgo::tiling::ComputeSparseFlashMlaGradTiling(SmlaTilingShape<Table>(in, a.layout), a, dtype,
                                                                CubeOf(p));
    return Plan(t, t.result.data.usedAicNum, t.result.workspaceBytes, /*all_cores_at_once=*/true);
  }
};

}  // namespace mgo::op_host

#include "sparse_flash_mla_grad_def.h"  // the OpDef, generated from the table
