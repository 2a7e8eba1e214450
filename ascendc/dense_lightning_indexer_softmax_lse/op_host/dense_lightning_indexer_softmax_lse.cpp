// DenseLightningIndexerSoftmaxLse: what its op_host does that the table cannot say,
// DenseLightningIndexerSoftmaxLseHost: Tile over the pure tiling in
// ascendc/dense_lightning_indexer_softmax_lse/dense_lightning_indexer_softmax_lse_tiling.h. The shape
// rule (infer_shape/dense_lightning_indexer_softmax_lse.h) and the OpDef come from the table:
// DenseLightningIndexerSoftmaxLseDef in common/op_host_table.h, dense_lightning_indexer_softmax_lse_def.h.
// Run by the shared adapter (common/op_host_adapter.h), tested on CPU. CANN-only, NOT compiled with
// CANN in this repository's CI (no CANN toolkit here); scripts/build_ascend.sh builds it.
#include "../../common/op_host_adapter.h"
#include "../../common/op_host_tokens.h"
#include "../../common/op_host_table.h"
#include "../dense_lightning_indexer_softmax_lse_tiling.h"

namespace mgo::op_host {

// float16/bfloat16 inputs, weights of the same dtype or float32; optional lengths may be omitted
// or be the zero-size placeholder.
struct DenseLightningIndexerSoftmaxLseHost : DenseLightningIndexerSoftmaxLseDef {
  // TND without lengths (one sequence) is batch 0; the lengths' values live on the device, so
  // tokens are balanced by count.
  static auto Tile(const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype, const Table::Attrs& a,
                   const Platform& p) {
    const mgo::infer::TensorDesc &qi = in[Table::In::kQueryIndex], &ki = in[Table::In::kKeyIndex];
    const size_t r = CheckTokenRank(a.layout, {&qi, &ki}, "query_index/key_index");
    const mgo::tiling::IndexerShape s{ReadIndexerTokens<Table>(a.layout, qi, ki, in),
                                      Dim(qi, r - 2), Dim(qi, r - 1),
                                      !mgo::infer::is_absent(in[Table::In::kCmpResidualK].shape)};
    const auto t = mgo::tiling::ComputeDenseLightningIndexerSoftmaxLseTiling(
        s, a, dtype, in[Table::In::kWeights].dtype == mgo::infer::DType::kFloat32,
        mgo::tiling::SeqLengths{nullptr, nullptr, 0}, CubeOf(p));
    return Plan(t, t.result.data.usedAicNum, t.result.workspaceBytes);
  }
};

}  // namespace mgo::op_host

#include "dense_lightning_indexer_softmax_lse_def.h"  // the OpDef, generated from the table
