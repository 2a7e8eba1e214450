// ctypes entry points running dense_lightning_indexer_softmax_lse on the twin as a mixed launch,
// and exposing its pure tiling for the invariant tests.
#include <vector>

#include "harness_common.h"
#include "harness_indexer.h"

#include "../../ascendc/dense_lightning_indexer_softmax_lse/op_kernel/dense_lightning_indexer_softmax_lse.cpp"

namespace {

using mgo::tiling::DType;
using harness::DenseLightningIndexerSoftmaxLseAttrArgs;
using harness::IndexerArgs;
using harness::IndexerLens;
using Attrs = mgo::table::DenseLightningIndexerSoftmaxLse::Attrs;

mgo::tiling::DenseLightningIndexerSoftmaxLseTiling Tile(int dtype, const IndexerArgs& a, const Attrs& at,
                                                        const IndexerLens& lens, bool residual = false) {
  return mgo::tiling::ComputeDenseLightningIndexerSoftmaxLseTiling(harness::ToIndexerShape(a, at.layout, lens, residual), at,
                                                                   static_cast<DType>(dtype), a.weights_f32 != 0,
                                                                   lens.view, harness::IndexerPlatform(a));
}

}  // namespace

extern "C" {

// out = {usedAicNum, aivNum, keyChunk, ubBytes, workspaceBytes, tilingKey, aivWsBytes};
// row_start holds aivNum + 1 entries.
int twin_dli_schedule(int dtype, const IndexerArgs* a, const DenseLightningIndexerSoftmaxLseAttrArgs* raw,
                      const int32_t* lens_q, const int32_t* lens_kv, int64_t* out, int64_t* row_start, char* err,
                      int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    const Attrs attrs = harness::ToAttrs(*raw);
    const IndexerLens lens(*a, attrs.layout, lens_q, lens_kv);
    const auto tiling = Tile(dtype, *a, attrs, lens);
    const auto& r = tiling.result;
    if (harness::Refused(r, err, err_len)) return harness::kTilingError;
    const auto& t = r.data;
    const int64_t vals[] = {t.usedAicNum, t.aivNum, t.keyChunk, static_cast<int64_t>(r.ubBytes),
                            static_cast<int64_t>(r.workspaceBytes), static_cast<int64_t>(tiling.tilingKey),
                            static_cast<int64_t>(t.aivWsBytes)};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); ++i) out[i] = vals[i];
    for (uint32_t i = 0; i <= t.aivNum; ++i) row_start[i] = t.rowStart[i];
    return harness::kOk;
  });
}

int twin_dense_lightning_indexer_softmax_lse(int dtype, const IndexerArgs* a,
                                             const DenseLightningIndexerSoftmaxLseAttrArgs* raw, const void* qi,
                                             const void* ki, const void* w, const int32_t* lens_q,
                                             const int32_t* lens_kv, const int32_t* residual, float* smax,
                                             float* ssum, harness::RunInfo* info, char* err, int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    const Attrs attrs = harness::ToAttrs(*raw);
    const IndexerLens lens(*a, attrs.layout, lens_q, lens_kv);
    const auto tiling = Tile(dtype, *a, attrs, lens, residual != nullptr);
    if (harness::Refused(tiling.result, err, err_len)) return harness::kTilingError;
    const auto t1 = static_cast<uint64_t>(a->t1);
    const auto t2 = static_cast<uint64_t>(a->t2);
    const auto nidx = static_cast<uint64_t>(a->n_idx);
    const auto didx = static_cast<uint64_t>(a->d_idx);
    std::vector<uint8_t> ws(AscendC::twin::kSysWorkspaceBytes + tiling.result.workspaceBytes, 0xFF);
    auto tiling_gm = harness::TilingBytes(tiling.result.data);
    harness::GmScope gm;
    gm.Input(qi, t1 * nidx * didx * 2, "query_index");
    gm.Input(ki, t2 * didx * 2, "key_index");
    gm.Input(w, t1 * nidx * (a->weights_f32 ? 4 : 2), "weights");
    lens.Register(gm, *a, lens_q, lens_kv);
    if (residual != nullptr) gm.Input(residual, harness::ResidualCount(*a) * 4, "cmp_residual_k");
    gm.Output(smax, t1 * 4, "softmax_max_index");
    gm.Output(ssum, t1 * 4, "softmax_sum_index");
    gm.Workspace(ws.data(), ws.size(), "workspace");
    gm.Input(tiling_gm.data(), tiling_gm.size(), "tiling");
    auto u8 = [](const void* p) { return static_cast<GM_ADDR>(const_cast<void*>(p)); };
    const auto stats = AscendC::twin::LaunchMix(
        tiling.result.data.usedAicNum, tiling.tilingKey, harness::ArchOf(a->arch),
        static_cast<uint64_t>(a->seed), [&] {
          dense_lightning_indexer_softmax_lse(u8(qi), u8(ki), u8(w), lens.Q(lens_q),
                                              lens.Kv(lens_kv), residual != nullptr ? u8(residual) : nullptr, u8(smax), u8(ssum), ws.data(),
                                              tiling_gm.data());
        });
    *info = harness::RunInfo{static_cast<int64_t>(stats.ub_peak_bytes), static_cast<int64_t>(tiling.result.ubBytes),
                             stats.cores, tiling.result.data.keyChunk, 0, 0};
    harness::FillWriteStats(info);
    return harness::kOk;
  });
}

}  // extern "C"
