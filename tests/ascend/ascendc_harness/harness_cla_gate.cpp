// ctypes entry points running the cla_gate kernels on the twin.
#include "harness_common.h"

#include "../../ascendc/cla_gate_backward/op_kernel/cla_gate_backward.cpp"
#include "../../ascendc/cla_gate_merge/op_kernel/cla_gate_merge.cpp"

namespace {

using mgo::tiling::ClaGateKernel;
using mgo::tiling::ClaGateShape;
using mgo::tiling::ClaGateTilingResult;
using mgo::tiling::DType;

ClaGateTilingResult Tiling(int kernel, int64_t t, int64_t n, int64_t d, int64_t core_num, int64_t ub_bytes) {
  const ClaGateShape shape{static_cast<uint64_t>(t), static_cast<uint64_t>(n), static_cast<uint64_t>(d)};
  return mgo::tiling::ComputeClaGateTiling(kernel == 0 ? ClaGateKernel::kMerge : ClaGateKernel::kBackward,
                                           shape, static_cast<uint32_t>(core_num),
                                           static_cast<uint64_t>(ub_bytes));
}

}  // namespace

extern "C" {

// kernel: 0 merge, 1 backward. Writes used cores, tile rows, UB bytes and per-core ranges
// (arrays of core_num entries).
int twin_cla_gate_schedule(int kernel, int64_t t, int64_t n, int64_t d, int64_t core_num, int64_t ub_bytes,
                           int64_t* used_cores, int64_t* tile_rows, int64_t* tiling_ub, int64_t* starts,
                           int64_t* counts, char* err, int64_t err_len) {
  const auto r = Tiling(kernel, t, n, d, core_num, ub_bytes);
  if (harness::Refused(r, err, err_len)) return harness::kTilingError;
  *used_cores = r.data.usedCoreNum;
  *tile_rows = r.data.tileRows;
  *tiling_ub = static_cast<int64_t>(r.ubBytes);
  harness::WriteRanges(r.data.usedCoreNum, r.data.rowsPerCore, r.data.rowsRemainder, starts, counts);
  return harness::kOk;
}

int twin_cla_gate_backward(int dtype, const harness::ClaGateBackwardAttrArgs* raw, int64_t t, int64_t n, int64_t d,
                           const void* grad, const void* og, const void* ol, const void* zg, const void* zl,
                           void* dog, void* dol, void* dzg, void* dzl, int64_t core_num, int64_t ub_bytes,
                           int64_t arch, harness::RunInfo* info, char* err, int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    harness::ToAttrs(*raw);  // read as the op_host reads them; the kernel takes none (TND only)
    const auto tiling = mgo::tiling::ComputeClaGateBackwardTiling(
        ClaGateShape{static_cast<uint64_t>(t), static_cast<uint64_t>(n), static_cast<uint64_t>(d)},
        static_cast<DType>(dtype), static_cast<uint32_t>(core_num), static_cast<uint64_t>(ub_bytes));
    if (harness::Refused(tiling.result, err, err_len)) return harness::kTilingError;
    const uint64_t big = static_cast<uint64_t>(t * n * d) * 2;
    const uint64_t gate = static_cast<uint64_t>(t * n) * 2;
    auto tiling_gm = harness::TilingBytes(tiling.result.data);
    harness::GmScope gm;
    gm.Input(grad, big, "grad_merged");
    gm.Input(og, big, "global_attn");
    gm.Input(ol, big, "local_attn");
    gm.Input(zg, gate, "global_gate_logits");
    gm.Input(zl, gate, "local_gate_logits");
    gm.Output(dog, big, "grad_global_attn");
    gm.Output(dol, big, "grad_local_attn");
    gm.Output(dzg, gate, "grad_global_gate_logits");
    gm.Output(dzl, gate, "grad_local_gate_logits");
    gm.Input(tiling_gm.data(), tiling_gm.size(), "tiling");
    auto u8 = [](const void* p) { return static_cast<GM_ADDR>(const_cast<void*>(p)); };
    const auto stats = AscendC::twin::Launch(tiling.result.data.usedCoreNum, tiling.tilingKey,
                                             harness::ArchOf(arch), [&] {
      cla_gate_backward(u8(grad), u8(og), u8(ol), u8(zg), u8(zl), u8(dog), u8(dol), u8(dzg), u8(dzl), nullptr,
                        tiling_gm.data());
    });
    *info = harness::RunInfo{static_cast<int64_t>(stats.ub_peak_bytes), static_cast<int64_t>(tiling.result.ubBytes),
                             stats.blocks, tiling.result.data.tileRows, 0, 0};
    harness::FillWriteStats(info);
    return harness::kOk;
  });
}

int twin_cla_gate_merge(int dtype, int64_t t, int64_t n, int64_t d, const void* og, const void* ol,
                        const void* zg, const void* zl, void* merged, int64_t core_num, int64_t ub_bytes,
                        int64_t arch, harness::RunInfo* info, char* err, int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    const auto tiling = mgo::tiling::ComputeClaGateMergeTiling(
        ClaGateShape{static_cast<uint64_t>(t), static_cast<uint64_t>(n), static_cast<uint64_t>(d)},
        static_cast<DType>(dtype), static_cast<uint32_t>(core_num), static_cast<uint64_t>(ub_bytes));
    if (harness::Refused(tiling.result, err, err_len)) return harness::kTilingError;
    const uint64_t big = static_cast<uint64_t>(t * n * d) * 2;
    const uint64_t gate = static_cast<uint64_t>(t * n) * 2;
    auto tiling_gm = harness::TilingBytes(tiling.result.data);
    harness::GmScope gm;
    gm.Input(og, big, "global_attn");
    gm.Input(ol, big, "local_attn");
    gm.Input(zg, gate, "global_gate_logits");
    gm.Input(zl, gate, "local_gate_logits");
    gm.Output(merged, big, "merged");
    gm.Input(tiling_gm.data(), tiling_gm.size(), "tiling");
    auto u8 = [](const void* p) { return static_cast<GM_ADDR>(const_cast<void*>(p)); };
    const auto stats = AscendC::twin::Launch(tiling.result.data.usedCoreNum, tiling.tilingKey,
                                             harness::ArchOf(arch), [&] {
      cla_gate_merge(u8(og), u8(ol), u8(zg), u8(zl), u8(merged), nullptr, tiling_gm.data());
    });
    *info = harness::RunInfo{static_cast<int64_t>(stats.ub_peak_bytes), static_cast<int64_t>(tiling.result.ubBytes),
                             stats.blocks, tiling.result.data.tileRows, 0, 0};
    harness::FillWriteStats(info);
    return harness::kOk;
  });
}

}  // extern "C"
