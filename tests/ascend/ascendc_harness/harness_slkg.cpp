// ctypes entry points running sparse_lightning_indexer_kl_loss_grad on the twin as a mixed launch, and
// exposing its pure tiling for the invariant tests.
#include <vector>

#include "harness_common.h"
#include "harness_indexer.h"

#include "../../ascendc/sparse_lightning_indexer_kl_loss_grad/op_kernel/sparse_lightning_indexer_kl_loss_grad.cpp"

namespace {

using mgo::tiling::DType;
using harness::IndexerArgs;
using harness::IndexerLens;
using harness::SparseLightningIndexerKLLossGradAttrArgs;

mgo::tiling::SparseLightningIndexerKLLossGradTiling Tile(int dtype, const IndexerArgs& a,
                                                         const mgo::table::SparseLightningIndexerKLLossGrad::Attrs& at,
                                                         const IndexerLens& lens, bool residual = false) {
  const mgo::tiling::SlkgShape shape{harness::ToIndexerShape(a, at.layout, lens, residual), static_cast<uint64_t>(a.k)};
  return mgo::tiling::ComputeSparseLightningIndexerKLLossGradTiling(shape, at, static_cast<DType>(dtype),
                                                                    a.weights_f32 != 0, lens.view,
                                                                    harness::IndexerPlatform(a));
}

}  // namespace

extern "C" {

// out = {usedAicNum, aivNum, kPad, gatherRows, keyBlock, keyBlocks, rowChunk, mKey, ubBytes,
// workspaceBytes, tilingKey, aivWsBytes, wsDi, wsLoss}; row_start / key_block_start hold aivNum + 1 entries.
int twin_slkg_schedule(int dtype, const IndexerArgs* a, const SparseLightningIndexerKLLossGradAttrArgs* raw,
                       const int32_t* lens_q, const int32_t* lens_kv, int64_t* out, int64_t* row_start,
                       int64_t* key_block_start, char* err, int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    const auto attrs = harness::ToAttrs(*raw);
    const IndexerLens lens(*a, attrs.layout, lens_q, lens_kv);
    const auto tiling = Tile(dtype, *a, attrs, lens);
    const auto& r = tiling.result;
    if (harness::Refused(r, err, err_len)) return harness::kTilingError;
    const auto& t = r.data;
    const int64_t vals[] = {t.usedAicNum, t.aivNum, t.kPad, t.gatherRows, t.keyBlock, t.keyBlocks, t.rowChunk,
                            t.mKey, static_cast<int64_t>(r.ubBytes), static_cast<int64_t>(r.workspaceBytes),
                            static_cast<int64_t>(tiling.tilingKey), static_cast<int64_t>(t.aivWsBytes),
                            static_cast<int64_t>(t.wsDi), static_cast<int64_t>(t.wsLoss)};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); ++i) out[i] = vals[i];
    for (uint32_t i = 0; i <= t.aivNum; ++i) {
      row_start[i] = t.rowStart[i];
      key_block_start[i] = t.keyBlockStart[i];
    }
    return harness::kOk;
  });
}

int twin_sparse_lightning_indexer_kl_loss_grad(int dtype, const IndexerArgs* a,
                                               const SparseLightningIndexerKLLossGradAttrArgs* raw, const void* qi,
                                               const void* ki, const void* w, const int32_t* idx, const float* target,
                                               const int32_t* lens_q, const int32_t* lens_kv, const int32_t* residual,
                                               void* dqi, void* dki, void* dw, float* softmax_out, float* loss,
                                               harness::RunInfo* info, char* err, int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    const auto attrs = harness::ToAttrs(*raw);
    const IndexerLens lens(*a, attrs.layout, lens_q, lens_kv);
    const auto tiling = Tile(dtype, *a, attrs, lens, residual != nullptr);
    if (harness::Refused(tiling.result, err, err_len)) return harness::kTilingError;
    const auto t1 = static_cast<uint64_t>(a->t1);
    const auto t2 = static_cast<uint64_t>(a->t2);
    const auto nidx = static_cast<uint64_t>(a->n_idx);
    const auto didx = static_cast<uint64_t>(a->d_idx);
    const uint64_t w_bytes = a->weights_f32 ? 4 : 2;
    std::vector<uint8_t> ws(AscendC::twin::kSysWorkspaceBytes + tiling.result.workspaceBytes, 0xFF);
    auto tiling_gm = harness::TilingBytes(tiling.result.data);
    harness::GmScope gm;
    gm.Input(qi, t1 * nidx * didx * 2, "query_index");
    gm.Input(ki, t2 * didx * 2, "key_index");
    gm.Input(w, t1 * nidx * w_bytes, "weights");
    gm.Input(idx, t1 * a->k * 4, "sparse_indices");
    gm.Input(target, t1 * a->k * 4, "attn_softmax_l1_norm");
    lens.Register(gm, *a, lens_q, lens_kv);
    if (residual != nullptr) gm.Input(residual, harness::ResidualCount(*a) * 4, "cmp_residual_k");
    gm.Output(dqi, t1 * nidx * didx * 2, "d_query_index");
    gm.Output(dki, t2 * didx * 2, "d_key_index");
    gm.Output(dw, t1 * nidx * w_bytes, "d_weights");
    gm.Output(softmax_out, t1 * a->k * 4, "softmax_out");
    gm.Output(loss, 4, "loss");
    gm.Workspace(ws.data(), ws.size(), "workspace");
    gm.Input(tiling_gm.data(), tiling_gm.size(), "tiling");
    auto u8 = [](const void* p) { return static_cast<GM_ADDR>(const_cast<void*>(p)); };
    const auto stats = AscendC::twin::LaunchMix(
        tiling.result.data.usedAicNum, tiling.tilingKey, harness::ArchOf(a->arch), static_cast<uint64_t>(a->seed),
        [&] {
          sparse_lightning_indexer_kl_loss_grad(u8(qi), u8(ki), u8(w), u8(idx), u8(target), lens.Q(lens_q),
                                                lens.Kv(lens_kv), residual != nullptr ? u8(residual) : nullptr,
                                                u8(dqi), u8(dki), u8(dw), u8(softmax_out), u8(loss), ws.data(),
                                                tiling_gm.data());
        });
    *info = harness::RunInfo{static_cast<int64_t>(stats.ub_peak_bytes), static_cast<int64_t>(tiling.result.ubBytes),
                             stats.cores, tiling.result.data.kPad, 0, 0};
    harness::FillWriteStats(info);
    return harness::kOk;
  });
}

}  // extern "C"
