// ctypes entry points running the rope and rope_grad kernels on the twin.
#include "harness_common.h"

#include "../../ascendc/rope/op_kernel/rope.cpp"
#include "../../ascendc/rope_grad/op_kernel/rope_grad.cpp"

namespace {

using mgo::tiling::DType;
using mgo::tiling::RopeShape;

RopeShape Shape(int64_t n_tokens, int64_t hidden, int64_t max_seq, int64_t batch) {
  return RopeShape{static_cast<uint64_t>(n_tokens), static_cast<uint64_t>(hidden), static_cast<uint64_t>(max_seq),
                   static_cast<uint64_t>(batch)};
}

}  // namespace

extern "C" {

int twin_rope_schedule(int64_t n_tokens, int64_t hidden, int64_t max_seq, int64_t batch, int64_t core_num,
                       int64_t ub_bytes, int64_t* used_cores, int64_t* tile_rows, int64_t* tiling_ub,
                       int64_t* starts, int64_t* counts, char* err, int64_t err_len) {
  const auto r = mgo::tiling::ComputeRopeFamilyTiling(Shape(n_tokens, hidden, max_seq, batch),
                                                      static_cast<uint32_t>(core_num),
                                                      static_cast<uint64_t>(ub_bytes));
  if (harness::Refused(r, err, err_len)) return harness::kTilingError;
  *used_cores = r.data.usedCoreNum;
  *tile_rows = r.data.tileRows;
  *tiling_ub = static_cast<int64_t>(r.ubBytes);
  harness::WriteRanges(r.data.usedCoreNum, r.data.rowsPerCore, r.data.rowsRemainder, starts, counts);
  return harness::kOk;
}

// grad: null runs rope (forward), else rope_grad with these attributes.
int twin_rope_family(const harness::RopeGradAttrArgs* grad, int dtype, int64_t n_tokens, int64_t hidden,
                     int64_t max_seq, int64_t batch,
                     const void* x1, const void* x2, const void* cos, const void* sin, const int32_t* seq_len,
                     void* y1, void* y2, int64_t core_num, int64_t ub_bytes, int64_t arch, harness::RunInfo* info,
                     char* err, int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    const auto shape = Shape(n_tokens, hidden, max_seq, batch);
    const auto dt = static_cast<DType>(dtype);
    const auto cores = static_cast<uint32_t>(core_num);
    const auto ub = static_cast<uint64_t>(ub_bytes);
    mgo::tiling::RopeTilingResult tiling{};
    uint64_t key = 0;
    if (grad == nullptr) {
      const auto t = mgo::tiling::ComputeRopeTiling(shape, dt, cores, ub);
      tiling = t.result;
      key = t.tilingKey;
    } else {
      const auto t = mgo::tiling::ComputeRopeGradTiling(shape, dt, harness::ToAttrs(*grad).mode, cores, ub);
      tiling = t.result;
      key = t.tilingKey;
    }
    if (harness::Refused(tiling, err, err_len)) return harness::kTilingError;
    const uint64_t big = static_cast<uint64_t>(n_tokens * hidden) * 2;
    const uint64_t trig = static_cast<uint64_t>(max_seq) * mgo::tiling::kRopeHeadDim * 2;
    auto tiling_gm = harness::TilingBytes(tiling.data);
    harness::GmScope gm;
    gm.Input(x1, big, "x1");
    gm.Input(x2, big, "x2");
    gm.Input(cos, trig, "cos");
    gm.Input(sin, trig, "sin");
    gm.Input(seq_len, static_cast<uint64_t>(batch) * sizeof(int32_t), "q_seq_len");
    gm.Output(y1, big, "y1");
    gm.Output(y2, big, "y2");
    gm.Input(tiling_gm.data(), tiling_gm.size(), "tiling");
    auto u8 = [](const void* p) { return static_cast<GM_ADDR>(const_cast<void*>(p)); };
    const auto stats = AscendC::twin::Launch(tiling.data.usedCoreNum, key, harness::ArchOf(arch), [&] {
      if (grad == nullptr) {
        rope(u8(x1), u8(x2), u8(cos), u8(sin), u8(seq_len), u8(y1), u8(y2), nullptr, tiling_gm.data());
      } else {
        rope_grad(u8(x1), u8(x2), u8(cos), u8(sin), u8(seq_len), u8(y1), u8(y2), nullptr, tiling_gm.data());
      }
    });
    *info = harness::RunInfo{static_cast<int64_t>(stats.ub_peak_bytes), static_cast<int64_t>(tiling.ubBytes),
                             stats.blocks, tiling.data.tileRows, 0, 0};
    harness::FillWriteStats(info);
    return harness::kOk;
  });
}

}  // extern "C"
