// SparseFlashMla: what its op_host does that the table cannot say, SparseFlashMlaHost: Tile over the pure
// tiling in ascendc/sparse_flash_mla/sparse_flash_mla_tiling.h. The shape rule (infer_shape/sparse_flash_mla.h)
// and the OpDef come from the table: SparseFlashMlaDef in common/op_host_table.h, sparse_flash_mla_def.h. Run by
// the shared adapter (common/op_host_adapter.h), tested on CPU. CANN-only, NOT compiled with CANN in this
// repository's CI (no CANN toolkit here); scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../common/op_host_smla.h"
#include "../../common/op_host_table.h"
#include "../sparse_flash_mla_tiling.h"

namespace mgo::op_host {

// Optional inputs may be omitted or be the zero-size placeholder; the length tensors stay on the device (new
// lengths need no recompilation), so rows are balanced by count.
struct SparseFlashMlaHost : SparseFlashMlaDef {
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const Table::Attrs& a,
                   const Platform& p) {
    const auto t = mgo::tiling::ComputeSparseFlashMlaTiling(SmlaTilingShape<Table>(in, a.layout), a, dtype, nullptr,
                                                            CubeOf(p));
    return Plan(t, t.result.data.usedAicNum, t.result.workspaceBytes);
  }
};

}  // namespace mgo::op_host

#include "sparse_flash_mla_def.h"  // the OpDef, generated from the table
