// ctypes entry points running dense_lightning_indexer_grad_kl_loss on the twin as a mixed launch,
// and exposing its pure tiling for the invariant tests. The shape struct is SliArgs (its k unused);
// n2, the key heads (1 or N1 on Ascend), comes beside it.
#include <vector>

#include "harness_common.h"
#include "harness_indexer.h"

#include "../../ascendc/dense_lightning_indexer_grad_kl_loss/op_kernel/dense_lightning_indexer_grad_kl_loss.cpp"

namespace {

using mgo::tiling::DType;
using harness::DenseLightningIndexerGradKLLossAttrArgs;
using harness::IndexerLens;
using harness::SliArgs;
using Attrs = mgo::table::DenseLightningIndexerGradKLLoss::Attrs;

mgo::tiling::DenseLightningIndexerGradKLLossTiling Tile(int dtype, const SliArgs& a, int64_t n2, const Attrs& at,
                                                        const IndexerLens& lens, bool residual = false) {
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  const mgo::tiling::DlgShape shape{harness::Tokens(a, at.layout, lens), u(a.n1), u(n2), u(a.d), u(a.dr), u(a.n_idx),
                                    u(a.d_idx), residual};
  return mgo::tiling::ComputeDenseLightningIndexerGradKLLossTiling(shape, at, static_cast<DType>(dtype),
                                                                   a.weights_f32 != 0, lens.view,
                                                                   harness::IndexerPlatform(a));
}

}  // namespace

extern "C" {

// out = {usedAicNum, aivNum, keyChunk, tileRows, keyBlock, keyBlocks, tokChunk, mMain, mKey, ubBytes,
// workspaceBytes, tilingKey, aivWsBytes, wsLoss, qGroup}; row_start / key_block_start hold aivNum + 1 entries.
int twin_dlig_schedule(int dtype, const SliArgs* a, const DenseLightningIndexerGradKLLossAttrArgs* raw, int64_t n2,
                       const int32_t* lens_q, const int32_t* lens_kv, int64_t* out, int64_t* row_start,
                       int64_t* key_block_start, char* err, int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    const Attrs attrs = harness::ToAttrs(*raw);
    const IndexerLens lens(*a, attrs.layout, lens_q, lens_kv);
    const auto tiling = Tile(dtype, *a, n2, attrs, lens);
    const auto& r = tiling.result;
    if (harness::Refused(r, err, err_len)) return harness::kTilingError;
    const auto& t = r.data;
    const int64_t vals[] = {t.usedAicNum, t.aivNum, t.keyChunk, t.tileRows, t.keyBlock, t.keyBlocks, t.tokChunk,
                            t.mMain, t.mKey, static_cast<int64_t>(r.ubBytes),
                            static_cast<int64_t>(r.workspaceBytes), static_cast<int64_t>(tiling.tilingKey),
                            static_cast<int64_t>(t.aivWsBytes), static_cast<int64_t>(t.wsLoss), t.qGroup};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); ++i) out[i] = vals[i];
    for (uint32_t i = 0; i <= t.aivNum; ++i) {
      row_start[i] = t.rowStart[i];
      key_block_start[i] = t.keyBlockStart[i];
    }
    return harness::kOk;
  });
}

int twin_dense_lightning_indexer_grad_kl_loss(int dtype, const SliArgs* a,
                                              const DenseLightningIndexerGradKLLossAttrArgs* raw, int64_t n2,
                                              const void* q,
                                              const void* k, const void* qi, const void* ki, const void* w,
                                              const float* smax, const float* ssum, const float* smax_idx,
                                              const float* ssum_idx, const void* qr, const void* kr,
                                              const int32_t* lens_q, const int32_t* lens_kv, const int32_t* residual,
                                              void* dqi, void* dki,
                                              void* dw, float* loss, harness::RunInfo* info, char* err,
                                              int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    const Attrs attrs = harness::ToAttrs(*raw);
    const IndexerLens lens(*a, attrs.layout, lens_q, lens_kv);
    const auto tiling = Tile(dtype, *a, n2, attrs, lens, residual != nullptr);
    if (harness::Refused(tiling.result, err, err_len)) return harness::kTilingError;
    const auto t1 = static_cast<uint64_t>(a->t1);
    const auto t2 = static_cast<uint64_t>(a->t2);
    const auto n1 = static_cast<uint64_t>(a->n1);
    const auto nidx = static_cast<uint64_t>(a->n_idx);
    const auto didx = static_cast<uint64_t>(a->d_idx);
    const uint64_t w_bytes = a->weights_f32 ? 4 : 2;
    std::vector<uint8_t> ws(AscendC::twin::kSysWorkspaceBytes + tiling.result.workspaceBytes, 0xFF);
    auto tiling_gm = harness::TilingBytes(tiling.result.data);
    harness::GmScope gm;
    gm.Input(q, t1 * n1 * a->d * 2, "query");
    const auto k_rows = t2 * static_cast<uint64_t>(n2);
    gm.Input(k, k_rows * a->d * 2, "key");
    gm.Input(qi, t1 * nidx * didx * 2, "query_index");
    gm.Input(ki, t2 * didx * 2, "key_index");
    gm.Input(w, t1 * nidx * w_bytes, "weights");
    gm.Input(smax, t1 * n1 * 4, "softmax_max");
    gm.Input(ssum, t1 * n1 * 4, "softmax_sum");
    gm.Input(smax_idx, t1 * 4, "softmax_max_index");
    gm.Input(ssum_idx, t1 * 4, "softmax_sum_index");
    const bool rope = a->dr > 0;
    if (rope) {
      gm.Input(qr, t1 * n1 * a->dr * 2, "query_rope");
      gm.Input(kr, k_rows * a->dr * 2, "key_rope");
    }
    lens.Register(gm, *a, lens_q, lens_kv);
    if (residual != nullptr) gm.Input(residual, harness::ResidualCount(*a) * 4, "cmp_residual_k");
    gm.Output(dqi, t1 * nidx * didx * 2, "d_query_index");
    gm.Output(dki, t2 * didx * 2, "d_key_index");
    gm.Output(dw, t1 * nidx * w_bytes, "d_weights");
    gm.Output(loss, 4, "loss");
    gm.Workspace(ws.data(), ws.size(), "workspace");
    gm.Input(tiling_gm.data(), tiling_gm.size(), "tiling");
    auto u8 = [](const void* p) { return static_cast<GM_ADDR>(const_cast<void*>(p)); };
    const auto stats = AscendC::twin::LaunchMix(
        tiling.result.data.usedAicNum, tiling.tilingKey, harness::ArchOf(a->arch),
        static_cast<uint64_t>(a->seed), [&] {
          dense_lightning_indexer_grad_kl_loss(u8(q), u8(k), u8(qi), u8(ki), u8(w), u8(smax), u8(ssum),
                                               u8(smax_idx), u8(ssum_idx), rope ? u8(qr) : nullptr,
                                               rope ? u8(kr) : nullptr, lens.Q(lens_q),
                                               lens.Kv(lens_kv), residual != nullptr ? u8(residual) : nullptr, u8(dqi), u8(dki), u8(dw), u8(loss),
                                               ws.data(), tiling_gm.data());
        });
    *info = harness::RunInfo{static_cast<int64_t>(stats.ub_peak_bytes), static_cast<int64_t>(tiling.result.ubBytes),
                             stats.cores, tiling.result.data.keyChunk, 0, 0};
    harness::FillWriteStats(info);
    return harness::kOk;
  });
}

}  // extern "C"
