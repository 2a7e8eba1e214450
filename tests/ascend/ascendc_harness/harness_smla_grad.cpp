// ctypes entry points running sparse_flash_mla_grad on the twin as a mixed launch, and exposing its pure
// tiling for the invariant tests.
#include <vector>

#include "harness_common.h"

#include "../../ascendc/sparse_flash_mla_grad/op_kernel/sparse_flash_mla_grad.cpp"

namespace {

using harness::SmlaGradArgs;  // generated into harness_args.h with its ctypes mirror
using harness::SparseFlashMlaGradAttrArgs;
using mgo::tiling::DType;
using mgo::tiling::SmlaShape;

// The shared SmlaShape of the args: TND without cu_seqlens_q is batch 0 (one sequence); the cumulative lengths
// come together (has_cu: all of them given).
SmlaShape Shape(const SmlaGradArgs& a, mgo::table::Layout layout) {
  using mgo::tiling::SmlaLen;
  using mgo::tiling::SmlaLenBit;
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  const bool tnd = layout == mgo::table::Layout::kTND;
  uint32_t mask = 0;
  if (a.has_cu != 0) {
    mask |= SmlaLenBit(SmlaLen::kCuQ) | SmlaLenBit(SmlaLen::kCuOri);
    if (a.has_cmp != 0) mask |= SmlaLenBit(SmlaLen::kCuCmp);
  }
  if (a.has_used_q != 0) mask |= SmlaLenBit(SmlaLen::kUsedQ);
  if (a.has_used_ori != 0) mask |= SmlaLenBit(SmlaLen::kUsedOri);
  if (a.has_used_cmp != 0) mask |= SmlaLenBit(SmlaLen::kUsedCmp);
  if (a.has_residual != 0) mask |= SmlaLenBit(SmlaLen::kResidual);
  SmlaShape s{};
  s.layout = layout;
  s.batch = tnd && a.has_cu == 0 ? 0 : u(a.batch);
  s.t1 = u(a.t1);
  s.t2 = u(a.t2);
  s.t3 = u(a.t3);
  s.s1 = u(a.s1);
  s.s2 = u(a.s2);
  s.s3 = u(a.s3);
  s.n1 = u(a.n1);
  s.n2 = u(a.n2);
  s.d = u(a.d);
  s.kOri = u(a.k_ori);
  s.kCmp = u(a.k_cmp);
  s.hasSinks = a.has_sinks != 0;
  s.lenMask = mask;
  s.hasCmp = a.has_cmp != 0;
  return s;
}

mgo::tiling::SparseFlashMlaGradTiling Tile(int dtype, const SmlaGradArgs& a, const SparseFlashMlaGradAttrArgs& raw) {
  const auto attrs = harness::ToAttrs(raw);
  return mgo::tiling::ComputeSparseFlashMlaGradTiling(Shape(a, attrs.layout), attrs, static_cast<DType>(dtype),
                                                      harness::CubePlatformOf(a.arch, a.core_num, a.ub_bytes));
}

}  // namespace

extern "C" {

// The pure tiling: out = {usedAicNum, aivNum, keyChunk, rowChunk, ubBytes, workspaceBytes, tilingKey,
// ubTileRows, mRows, chunkCols}; row_start / ori_start / cmp_start: the AIVs' ranges (2 * core_num + 1).
int twin_smla_grad_schedule(int dtype, const SmlaGradArgs* a, const SparseFlashMlaGradAttrArgs* raw, int64_t* out,
                            int64_t* row_start, int64_t* ori_start, int64_t* cmp_start, char* err, int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    const auto tiling = Tile(dtype, *a, *raw);
    const auto& r = tiling.result;
    if (harness::Refused(r, err, err_len)) return harness::kTilingError;
    const auto& t = r.data;
    const int64_t vals[] = {t.usedAicNum, t.aivNum, t.keyChunk, t.rowChunk, static_cast<int64_t>(r.ubBytes),
                            static_cast<int64_t>(r.workspaceBytes), static_cast<int64_t>(tiling.tilingKey),
                            t.ubTileRows, t.mRows, t.chunkCols};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); ++i) out[i] = vals[i];
    for (uint32_t i = 0; i <= t.aivNum; ++i) {
      row_start[i] = t.rowStart[i];
      ori_start[i] = t.oriKeyStart[i];
      cmp_start[i] = t.cmpKeyStart[i];
    }
    return harness::kOk;
  });
}

// Inputs in the op's order (absent optional ones null), then the outputs (absent ones null).
int twin_sparse_flash_mla_grad(int dtype, const SmlaGradArgs* a, const SparseFlashMlaGradAttrArgs* raw,
                               const void* q, const void* d_out, const void* out, const float* lse, const void* ori,
                               const void* cmp, const int32_t* ori_idx, const int32_t* cmp_idx, const int32_t* cu_q,
                               const int32_t* cu_ori, const int32_t* cu_cmp, const int32_t* used_q,
                               const int32_t* used_ori, const int32_t* used_cmp, const int32_t* residual,
                               const float* sinks, void* dq, void* d_ori, void* d_cmp, float* d_sinks,
                               float* ori_l1, float* cmp_l1, harness::RunInfo* info, char* err, int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    const auto tiling = Tile(dtype, *a, *raw);
    if (harness::Refused(tiling.result, err, err_len)) return harness::kTilingError;
    const uint64_t q_elems = static_cast<uint64_t>(a->t1 * a->n1 * a->d);
    const uint64_t ori_elems = static_cast<uint64_t>(a->t2 * a->n2 * a->d);
    const uint64_t cmp_elems = static_cast<uint64_t>(a->t3 * a->n2 * a->d);
    const uint64_t idx_rows = static_cast<uint64_t>(a->t1 * a->n2);
    const uint64_t b = static_cast<uint64_t>(a->batch);
    std::vector<uint8_t> ws(AscendC::twin::kSysWorkspaceBytes + tiling.result.workspaceBytes, 0xFF);
    auto tiling_gm = harness::TilingBytes(tiling.result.data);
    harness::GmScope gm;
    gm.Input(q, q_elems * 2, "query");
    gm.Input(d_out, q_elems * 2, "d_out");
    gm.Input(out, q_elems * 2, "out");
    gm.Input(lse, static_cast<uint64_t>(a->t1 * a->n1) * 4, "softmax_lse");
    gm.Input(ori, ori_elems * 2, "ori_kv");
    if (cmp != nullptr) gm.Input(cmp, cmp_elems * 2, "cmp_kv");
    if (ori_idx != nullptr) gm.Input(ori_idx, idx_rows * a->k_ori * 4, "ori_sparse_indices");
    if (cmp_idx != nullptr) gm.Input(cmp_idx, idx_rows * a->k_cmp * 4, "cmp_sparse_indices");
    if (cu_q != nullptr) gm.Input(cu_q, (b + 1) * 4, "cu_seqlens_q");
    if (cu_ori != nullptr) gm.Input(cu_ori, (b + 1) * 4, "cu_seqlens_ori_kv");
    if (cu_cmp != nullptr) gm.Input(cu_cmp, (b + 1) * 4, "cu_seqlens_cmp_kv");
    if (used_q != nullptr) gm.Input(used_q, b * 4, "seqused_q");
    if (used_ori != nullptr) gm.Input(used_ori, b * 4, "seqused_ori_kv");
    if (used_cmp != nullptr) gm.Input(used_cmp, b * 4, "seqused_cmp_kv");
    if (residual != nullptr) gm.Input(residual, b * 4, "cmp_residual_kv");
    if (sinks != nullptr) gm.Input(sinks, static_cast<uint64_t>(a->n1) * 4, "sinks");
    gm.Output(dq, q_elems * 2, "d_query");
    gm.Output(d_ori, ori_elems * 2, "d_ori_kv");
    if (d_cmp != nullptr) gm.Output(d_cmp, cmp_elems * 2, "d_cmp_kv");
    if (d_sinks != nullptr) gm.Output(d_sinks, static_cast<uint64_t>(a->n1) * 4, "d_sinks");
    if (ori_l1 != nullptr) gm.Output(ori_l1, idx_rows * a->k_ori * 4, "ori_softmax_l1_norm");
    if (cmp_l1 != nullptr) gm.Output(cmp_l1, idx_rows * a->k_cmp * 4, "cmp_softmax_l1_norm");
    gm.Workspace(ws.data(), ws.size(), "workspace");
    gm.Input(tiling_gm.data(), tiling_gm.size(), "tiling");
    auto u8 = [](const void* p) { return static_cast<GM_ADDR>(const_cast<void*>(p)); };
    const auto stats = AscendC::twin::LaunchMix(
        tiling.result.data.usedAicNum, tiling.tilingKey, harness::ArchOf(a->arch), static_cast<uint64_t>(a->seed),
        [&] {
          sparse_flash_mla_grad(u8(q), u8(d_out), u8(out), u8(lse), u8(ori), u8(cmp), u8(ori_idx), u8(cmp_idx),
                                u8(cu_q), u8(cu_ori), u8(cu_cmp), u8(used_q), u8(used_ori), u8(used_cmp),
                                u8(residual), u8(sinks), u8(dq), u8(d_ori), u8(d_cmp), u8(d_sinks), u8(ori_l1),
                                u8(cmp_l1), ws.data(), tiling_gm.data());
        });
    *info = harness::RunInfo{static_cast<int64_t>(stats.ub_peak_bytes),
                             static_cast<int64_t>(tiling.result.ubBytes), stats.cores,
                             tiling.result.data.keyChunk, 0, 0};
    harness::FillWriteStats(info);
    return harness::kOk;
  });
}

}  // extern "C"
