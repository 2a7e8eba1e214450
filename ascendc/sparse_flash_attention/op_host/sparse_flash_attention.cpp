// SparseFlashAttention: what its op_host does that the table cannot say, SparseFlashAttentionHost:
// Tile over the pure tiling in ascendc/sparse_flash_attention/sparse_flash_attention_tiling.h. The
// shape rule (infer_shape/sparse_flash_attention.h) and the OpDef come from the table:
// SparseFlashAttentionDef in common/op_host_table.h, sparse_flash_attention_def.h. Run by the
// shared adapter (common/op_host_adapter.h), tested on CPU. CANN-only, NOT compiled with CANN in
// this repository's CI (no CANN toolkit here); scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../common/op_host_sfa.h"
#include "../../common/op_host_table.h"
#include "../sparse_flash_attention_tiling.h"

namespace mgo::op_host {

// Optional inputs may be omitted or be the zero-size placeholder. Lengths (TND cumulative, BSND
// per batch; int32 or int64, both the same) stay a device tensor: new lengths need no recompilation.
struct SparseFlashAttentionHost : SparseFlashAttentionDef {
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const Table::Attrs& a,
                   const Platform& p) {
    return TileSfa<Table>(mgo::tiling::ComputeSparseFlashAttentionTiling, in, dtype, a, p, /*all_cores_at_once=*/false);
  }
};

}  // namespace mgo::op_host

#include "sparse_flash_attention_def.h"  // the OpDef, generated from the table
