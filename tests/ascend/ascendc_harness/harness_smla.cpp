// ctypes entry points running sparse_flash_mla on the twin as a mixed launch, and exposing its pure tiling for
// the invariant tests.
#include <vector>

#include "harness_common.h"

#include "../../ascendc/sparse_flash_mla/op_kernel/sparse_flash_mla.cpp"

namespace {

using mgo::table::Layout;
using mgo::tiling::DType;
using mgo::tiling::SmlaLen;
using mgo::tiling::SmlaLensHost;
using mgo::tiling::SmlaShape;

using harness::SmlaArgs;  // generated into harness_args.h with its ctypes mirror
using harness::SparseFlashMlaAttrArgs;

constexpr uint32_t kLens = static_cast<uint32_t>(SmlaLen::kCount);

SmlaShape Shape(const SmlaArgs& a, Layout layout) {
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  return SmlaShape{layout,    u(a.batch), u(a.t1),     u(a.t2),          u(a.t3), u(a.s1),
                   u(a.s2),   u(a.s3),    u(a.n1),     u(a.n2),          u(a.d),  u(a.k_ori),
                   u(a.k_cmp), a.has_sinks != 0, static_cast<uint32_t>(a.len_mask), a.has_cmp != 0};
}

// The length arrays as the host tiling sees them: all of them when the call says they are known, else none.
SmlaLensHost HostLens(const SmlaArgs& a, const int32_t* const* lens) {
  SmlaLensHost h{};
  if (a.lens_known == 0) return h;
  for (uint32_t i = 0; i < kLens; ++i) h.v[i] = (a.len_mask >> i) & 1 ? lens[i] : nullptr;
  return h;
}

// Entries of length input i: cumulative ones B + 1, the others B (B = 1 for TND without cu_seqlens_q).
uint64_t LenEntries(const SmlaArgs& a, uint32_t i) {
  const uint64_t b = a.batch > 0 ? static_cast<uint64_t>(a.batch) : 1;
  return i <= static_cast<uint32_t>(SmlaLen::kCuCmp) ? b + 1 : b;
}

mgo::tiling::SparseFlashMlaTiling Tile(int dtype, const SmlaArgs& a, const SparseFlashMlaAttrArgs& raw,
                                       const int32_t* const* lens) {
  const auto attrs = harness::ToAttrs(raw);
  const SmlaLensHost host = HostLens(a, lens);
  return mgo::tiling::ComputeSparseFlashMlaTiling(Shape(a, attrs.layout), attrs, static_cast<DType>(dtype),
                                                  a.lens_known ? &host : nullptr,
                                                  harness::CubePlatformOf(a.arch, a.core_num, a.ub_bytes));
}

}  // namespace

extern "C" {

// The pure tiling: out = {usedAicNum, aivNum, keyChunk, ubBytes, workspaceBytes, tilingKey, ubTileRows,
// gatherRows, aivWsBytes}, row_start (2 * core_num + 1 entries).
int twin_smla_schedule(int dtype, const SmlaArgs* a, const SparseFlashMlaAttrArgs* raw, const int32_t* const* lens,
                       int64_t* out, int64_t* row_start, char* err, int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    const auto tiling = Tile(dtype, *a, *raw, lens);
    const auto& r = tiling.result;
    if (harness::Refused(r, err, err_len)) return harness::kTilingError;
    const auto& t = r.data;
    const int64_t vals[] = {t.usedAicNum, t.aivNum, t.keyChunk, static_cast<int64_t>(r.ubBytes),
                            static_cast<int64_t>(r.workspaceBytes), static_cast<int64_t>(tiling.tilingKey),
                            t.ubTileRows, t.gatherRows, static_cast<int64_t>(t.aivWsBytes)};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); ++i) out[i] = vals[i];
    for (uint32_t i = 0; i <= t.aivNum; ++i) row_start[i] = t.rowStart[i];
    return harness::kOk;
  });
}

// lens: the 7 length inputs in table order (null: absent).
int twin_sparse_flash_mla(int dtype, const SmlaArgs* a, const SparseFlashMlaAttrArgs* raw, const void* q,
                          const void* ori, const void* cmp, const int32_t* ori_idx, const int32_t* cmp_idx,
                          const int32_t* const* lens, const float* sinks, void* out, float* lse,
                          harness::RunInfo* info, char* err, int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    const auto tiling = Tile(dtype, *a, *raw, lens);
    if (harness::Refused(tiling.result, err, err_len)) return harness::kTilingError;
    const uint64_t q_rows = static_cast<uint64_t>(a->t1 * a->n1);
    std::vector<uint8_t> ws(AscendC::twin::kSysWorkspaceBytes + tiling.result.workspaceBytes, 0xFF);
    auto tiling_gm = harness::TilingBytes(tiling.result.data);
    harness::GmScope gm;
    gm.Input(q, q_rows * a->d * 2, "query");
    gm.Input(ori, static_cast<uint64_t>(a->t2 * a->n2 * a->d) * 2, "ori_kv");
    if (a->has_cmp) gm.Input(cmp, static_cast<uint64_t>(a->t3 * a->n2 * a->d) * 2, "cmp_kv");
    if (a->k_ori > 0) gm.Input(ori_idx, static_cast<uint64_t>(a->t1 * a->n2 * a->k_ori) * 4, "ori_sparse_indices");
    if (a->k_cmp > 0) gm.Input(cmp_idx, static_cast<uint64_t>(a->t1 * a->n2 * a->k_cmp) * 4, "cmp_sparse_indices");
    static const char* const kNames[kLens] = {"cu_seqlens_q", "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv", "seqused_q",
                                              "seqused_ori_kv", "seqused_cmp_kv", "cmp_residual_kv"};
    for (uint32_t i = 0; i < kLens; ++i) {
      if ((a->len_mask >> i) & 1) gm.Input(lens[i], LenEntries(*a, i) * 4, kNames[i]);
    }
    if (a->has_sinks) gm.Input(sinks, static_cast<uint64_t>(a->n1) * 4, "sinks");
    gm.Output(out, q_rows * a->d * 2, "attn_out");
    gm.Output(lse, q_rows * 4, "softmax_lse");
    gm.Workspace(ws.data(), ws.size(), "workspace");
    gm.Input(tiling_gm.data(), tiling_gm.size(), "tiling");
    auto u8 = [](const void* p) { return static_cast<GM_ADDR>(const_cast<void*>(p)); };
    const auto len = [&](uint32_t i) { return (a->len_mask >> i) & 1 ? u8(lens[i]) : nullptr; };
    const auto stats = AscendC::twin::LaunchMix(
        tiling.result.data.usedAicNum, tiling.tilingKey, harness::ArchOf(a->arch), static_cast<uint64_t>(a->seed),
        [&] {
          sparse_flash_mla(u8(q), u8(ori), a->has_cmp ? u8(cmp) : nullptr, a->k_ori > 0 ? u8(ori_idx) : nullptr,
                           a->k_cmp > 0 ? u8(cmp_idx) : nullptr, len(0), len(1), len(2), len(3), len(4), len(5),
                           len(6), a->has_sinks ? u8(sinks) : nullptr, u8(out), u8(lse), ws.data(),
                           tiling_gm.data());
        });
    *info = harness::RunInfo{static_cast<int64_t>(stats.ub_peak_bytes), static_cast<int64_t>(tiling.result.ubBytes),
                             stats.cores, tiling.result.data.keyChunk, 0, 0};
    harness::FillWriteStats(info);
    return harness::kOk;
  });
}

}  // extern "C"
