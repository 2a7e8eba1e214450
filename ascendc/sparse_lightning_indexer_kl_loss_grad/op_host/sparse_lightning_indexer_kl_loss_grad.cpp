// SparseLightningIndexerKLLossGrad: what its op_host does that the table cannot say,
// SparseLightningIndexerKLLossGradHost: Tile over the pure tiling in
// ascendc/sparse_lightning_indexer_kl_loss_grad/sparse_lightning_indexer_kl_loss_grad_tiling.h. The shape
// rule (infer_shape/sparse_lightning_indexer_kl_loss_grad.h) and the OpDef come from the table:
// SparseLightningIndexerKLLossGradDef in common/op_host_table.h, sparse_lightning_indexer_kl_loss_grad_def.h.
// Run by the shared adapter (common/op_host_adapter.h), tested on CPU. CANN-only, NOT compiled with CANN
// in this repository's CI (no CANN toolkit here); scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../common/op_host_tokens.h"
#include "../../common/op_host_table.h"
#include "../sparse_lightning_indexer_kl_loss_grad_tiling.h"

namespace mgo::op_host {

// float16/bfloat16 inputs, weights (and d_weights) of the same dtype or float32; optional lengths
// may be omitted or be the zero-size placeholder.
struct SparseLightningIndexerKLLossGradHost : SparseLightningIndexerKLLossGradDef {
  // TND without lengths (one sequence) is batch 0; the lengths' values live on the device, so
  // tokens are balanced by count. The key pass waits for every core's row pass (SyncAll): all cores
  // must start together.
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const Table::Attrs& a,
                   const Platform& p) {
    const mgo::infer::TensorDesc &qi = in[Table::In::kQueryIndex], &ki = in[Table::In::kKeyIndex],
                                 &si = in[Table::In::kSparseIndices];
    const size_t r = CheckTokenRank(a.layout, {&qi, &ki, &si}, "query_index/key_index/sparse_indices");
    const mgo::tiling::SlkgShape s{
        {ReadIndexerTokens<Table>(a.layout, qi, ki, in), Dim(qi, r - 2), Dim(qi, r - 1),
         !mgo::infer::is_absent(in[Table::In::kCmpResidualK].shape)},
        Dim(si, r - 1)};
    const auto t = mgo::tiling::ComputeSparseLightningIndexerKLLossGradTiling(
        s, a, dtype, in[Table::In::kWeights].dtype == mgo::infer::DType::kFloat32,
        mgo::tiling::SeqLengths{nullptr, nullptr, 0}, CubeOf(p));
    return Plan(t, t.result.data.usedAicNum, t.result.workspaceBytes, /*all_cores_at_once=*/true);
  }
};

}  // namespace mgo::op_host

#include "sparse_lightning_indexer_kl_loss_grad_def.h"  // the OpDef, generated from the table
