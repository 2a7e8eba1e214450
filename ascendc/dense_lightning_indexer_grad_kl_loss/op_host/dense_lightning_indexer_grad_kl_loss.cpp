// DenseLightningIndexerGradKLLoss: what its op_host does that the table cannot say,
// DenseLightningIndexerGradKLLossHost: Tile over the pure tiling in
// ascendc/dense_lightning_indexer_grad_kl_loss/dense_lightning_indexer_grad_kl_loss_tiling.h. The shape
// rule (infer_shape/dense_lightning_indexer_grad_kl_loss.h) and the OpDef come from the table:
// DenseLightningIndexerGradKLLossDef in common/op_host_table.h, dense_lightning_indexer_grad_kl_loss_def.h.
// Run by the shared adapter (common/op_host_adapter.h), tested on CPU. CANN-only, NOT compiled with
// CANN in this repository's CI (no CANN toolkit here); scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../common/op_host_tokens.h"
#include "../../common/op_host_table.h"
#include "../dense_lightning_indexer_grad_kl_loss_tiling.h"

namespace mgo::op_host {

// float16/bfloat16 inputs, weights (and d_weights) of the same dtype or float32; optional inputs
// may be omitted or be the zero-size placeholder.
struct DenseLightningIndexerGradKLLossHost : DenseLightningIndexerGradKLLossDef {
  // The pure tiling's view of the shapes (key heads N2 from key's dim -2: the tiling refuses
  // N2 != 1); TND without lengths (one sequence) is batch 0. The lengths' values live on the
  // device, so rows are balanced by count. The loss is summed after every core's row pass
  // (SyncAll): all cores must start together.
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const Table::Attrs& a,
                   const Platform& p) {
    const mgo::infer::TensorDesc &q = in[Table::In::kQuery], &k = in[Table::In::kKey],
                                 &qi = in[Table::In::kQueryIndex], &qr = in[Table::In::kQueryRope];
    const size_t r = CheckTokenRank(a.layout, {&q, &k, &qi}, "query/key/query_index");
    const uint64_t dr = mgo::infer::is_absent(qr.shape) ? 0 : Dim(qr, r - 1);
    const mgo::tiling::DlgShape s{ReadIndexerTokens<Table>(a.layout, q, k, in),
                                  Dim(q, r - 2), Dim(k, r - 2), Dim(q, r - 1), dr, Dim(qi, r - 2), Dim(qi, r - 1),
                                  !mgo::infer::is_absent(in[Table::In::kCmpResidualK].shape)};
    const auto t = mgo::tiling::ComputeDenseLightningIndexerGradKLLossTiling(
        s, a, dtype, in[Table::In::kWeights].dtype == mgo::infer::DType::kFloat32,
        mgo::tiling::SeqLengths{nullptr, nullptr, 0}, CubeOf(p));
    return Plan(t, t.result.data.usedAicNum, t.result.workspaceBytes, /*all_cores_at_once=*/true);
  }
};

}  // namespace mgo::op_host

#include "dense_lightning_indexer_grad_kl_loss_def.h"  // the OpDef, generated from the table
