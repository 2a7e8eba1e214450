// ctypes entry points running sparse_flash_attention(_grad) on the twin as mixed launches, and
// exposing their pure tiling for the invariant tests.
#include <vector>

#include "harness_common.h"

#include "../../ascendc/sparse_flash_attention/op_kernel/sparse_flash_attention.cpp"
#include "../../ascendc/sparse_flash_attention_grad/op_kernel/sparse_flash_attention_grad.cpp"

namespace {

using mgo::table::Layout;
using mgo::tiling::CubePlatform;
using mgo::tiling::DType;
using mgo::tiling::SeqLengths;
using mgo::tiling::SfaShape;

using harness::SfaArgs;  // generated into harness_args.h with its ctypes mirror
using harness::SparseFlashAttentionAttrArgs;
using harness::SparseFlashAttentionGradAttrArgs;

// The lengths of a call: int32 or int64 GM inputs (TND: cumulative, both or neither, given when
// batch > 0; BSND: per batch, each side given when its pointer is), and their host copies as the
// tiling reads them (int64), unless hidden from the tiling (harness::LengthsHidden).
struct HostLens {
  bool q = false;  // actual_seq_lengths_query is a GM input
  bool kv = false;
  uint32_t bsndLens = 0;
  uint64_t bytes = 0;  // of each given tensor
  std::vector<int64_t> hostQ, hostKv;
  SeqLengths view{nullptr, nullptr, 0};
  HostLens(const SfaArgs& a, Layout layout, const void* lq, const void* lkv) {
    if (layout == Layout::kTND) {
      q = kv = a.batch > 0 && lq != nullptr && lkv != nullptr;
    } else {
      q = lq != nullptr;
      kv = lkv != nullptr;
      bsndLens = (q ? mgo::tiling::kBsndLensQuery : 0) | (kv ? mgo::tiling::kBsndLensKv : 0);
    }
    bytes = static_cast<uint64_t>(a.batch) * (a.lens_int64 ? 8 : 4);
    if ((!q && !kv) || harness::LengthsHidden()) return;
    const auto read = [&](const void* p, int64_t b) -> int64_t {
      return a.lens_int64 ? static_cast<const int64_t*>(p)[b] : static_cast<const int32_t*>(p)[b];
    };
    for (int64_t b = 0; b < a.batch; ++b) {
      if (q) hostQ.push_back(read(lq, b));
      if (kv) hostKv.push_back(read(lkv, b));
    }
    view = SeqLengths{q ? hostQ.data() : nullptr, kv ? hostKv.data() : nullptr, static_cast<uint64_t>(a.batch)};
  }
};

// sinks: whether the sinks input is given (a non-null pointer at the entry points).
SfaShape Shape(const SfaArgs& a, Layout layout, const HostLens& lens, bool sinks) {
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  return SfaShape{{layout, u(a.batch), u(a.s1), u(a.s2), u(a.t1), u(a.t2), lens.bsndLens}, u(a.n1), u(a.n2), u(a.d),
                  u(a.dr), u(a.k), a.lens_int64 != 0, a.value_absent != 0, sinks};
}

CubePlatform Platform(const SfaArgs& a) {
  return harness::CubePlatformOf(a.arch, a.core_num, a.ub_bytes);
}

// The GM inputs both kernels take (absent optional ones are not registered).
struct SharedInputs {
  const void *q, *k, *v, *idx, *qr, *kr, *lens_q, *lens_kv;
  const float* sinks;  // null: absent
};

void RegisterShared(harness::GmScope& gm, const SfaArgs& a, const HostLens& lens, const SharedInputs& in) {
  const uint64_t q_rows = static_cast<uint64_t>(a.t1 * a.n1);
  const uint64_t k_rows = static_cast<uint64_t>(a.t2 * a.n2);
  gm.Input(in.q, q_rows * a.d * 2, "query");
  gm.Input(in.k, k_rows * a.d * 2, "key");
  if (!a.value_absent) gm.Input(in.v, k_rows * a.d * 2, "value");
  gm.Input(in.idx, static_cast<uint64_t>(a.t1 * a.n2 * a.k) * 4, "sparse_indices");
  if (a.dr > 0) {
    gm.Input(in.qr, q_rows * a.dr * 2, "query_rope");
    gm.Input(in.kr, k_rows * a.dr * 2, "key_rope");
  }
  if (lens.q) gm.Input(in.lens_q, lens.bytes, "actual_seq_lengths_query");
  if (lens.kv) gm.Input(in.lens_kv, lens.bytes, "actual_seq_lengths_kv");
  if (in.sinks != nullptr) gm.Input(in.sinks, static_cast<uint64_t>(a.n1) * 4, "sinks");
}

template <typename Result>
void FillInfo(harness::RunInfo* info, const AscendC::twin::MixStats& stats, const Result& r) {
  *info = harness::RunInfo{static_cast<int64_t>(stats.ub_peak_bytes), static_cast<int64_t>(r.ubBytes), stats.cores,
                           r.data.keyChunk, 0, 0};
  harness::FillWriteStats(info);
}

}  // namespace

extern "C" {

// Hides (1) or shows (0) the lengths' values to the pure tilings of every harness from now on.
void twin_hide_lengths(int hidden) { harness::LengthsHidden() = hidden != 0; }

// The pure tiling of the forward (`fwd` given) or the grad (`grad` given), with sinks or not.
// Writes the tiling's scalars and per-AIV ranges (arrays of 2 * core_num + 1 entries): out =
// {usedAicNum, aivNum, keyChunk, rowChunk, ubBytes, workspaceBytes, tilingKey, ubTileRows,
// gatherRows, chunkCols, mRows, aivWsBytes, wsDelta, wsSink, sinkTileRows}.
int twin_sfa_schedule(int dtype, const SfaArgs* a, const SparseFlashAttentionAttrArgs* fwd,
                      const SparseFlashAttentionGradAttrArgs* grad, int sinks, const void* lens_q,
                      const void* lens_kv, int64_t* out, int64_t* row_start, int64_t* key_row_start, char* err,
                      int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    const auto write = [&](const auto& tiling) -> int {
      const auto& r = tiling.result;
      if (harness::Refused(r, err, err_len)) return harness::kTilingError;
      const auto& t = r.data;
      const int64_t vals[] = {t.usedAicNum, t.aivNum, t.keyChunk, t.rowChunk, static_cast<int64_t>(r.ubBytes),
                              static_cast<int64_t>(r.workspaceBytes), static_cast<int64_t>(tiling.tilingKey),
                              t.ubTileRows, t.gatherRows, t.chunkCols, t.mRows, static_cast<int64_t>(t.aivWsBytes),
                              static_cast<int64_t>(t.wsDelta), static_cast<int64_t>(t.wsSink), t.sinkTileRows};
      for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); ++i) out[i] = vals[i];
      for (uint32_t i = 0; i <= t.aivNum; ++i) {
        row_start[i] = t.rowStart[i];
        key_row_start[i] = t.keyRowStart[i];
      }
      return harness::kOk;
    };
    const auto dt = static_cast<DType>(dtype);
    if (fwd != nullptr) {
      const auto attrs = harness::ToAttrs(*fwd);
      const HostLens lens(*a, attrs.layout, lens_q, lens_kv);
      return write(mgo::tiling::ComputeSparseFlashAttentionTiling(Shape(*a, attrs.layout, lens, sinks != 0), attrs, dt,
                                                                  lens.view, Platform(*a)));
    }
    const auto attrs = harness::ToAttrs(*grad);
    const HostLens lens(*a, attrs.layout, lens_q, lens_kv);
    return write(mgo::tiling::ComputeSparseFlashAttentionGradTiling(Shape(*a, attrs.layout, lens, sinks != 0), attrs, dt,
                                                                    lens.view, Platform(*a)));
  });
}

int twin_sparse_flash_attention(int dtype, const SfaArgs* a, const SparseFlashAttentionAttrArgs* raw, const void* q,
                                const void* k, const void* v, const int32_t* idx, const void* qr, const void* kr,
                                const void* lens_q, const void* lens_kv, const float* sinks, void* out, float* smax,
                                float* ssum, harness::RunInfo* info, char* err, int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    const auto attrs = harness::ToAttrs(*raw);
    const HostLens lens(*a, attrs.layout, lens_q, lens_kv);
    const auto tiling = mgo::tiling::ComputeSparseFlashAttentionTiling(
        Shape(*a, attrs.layout, lens, sinks != nullptr), attrs, static_cast<DType>(dtype), lens.view, Platform(*a));
    if (harness::Refused(tiling.result, err, err_len)) return harness::kTilingError;
    const uint64_t q_rows = static_cast<uint64_t>(a->t1 * a->n1);
    std::vector<uint8_t> ws(AscendC::twin::kSysWorkspaceBytes + tiling.result.workspaceBytes, 0xFF);
    auto tiling_gm = harness::TilingBytes(tiling.result.data);
    harness::GmScope gm;
    RegisterShared(gm, *a, lens, SharedInputs{q, k, v, idx, qr, kr, lens_q, lens_kv, sinks});
    gm.Output(out, q_rows * a->d * 2, "out");
    gm.Output(smax, q_rows * 4, "softmax_max");
    gm.Output(ssum, q_rows * 4, "softmax_sum");
    gm.Workspace(ws.data(), ws.size(), "workspace");
    gm.Input(tiling_gm.data(), tiling_gm.size(), "tiling");
    auto u8 = [](const void* p) { return static_cast<GM_ADDR>(const_cast<void*>(p)); };
    const auto stats = AscendC::twin::LaunchMix(
        tiling.result.data.usedAicNum, tiling.tilingKey, harness::ArchOf(a->arch),
        static_cast<uint64_t>(a->seed), [&] {
          sparse_flash_attention(u8(q), u8(k), a->value_absent ? nullptr : u8(v), u8(idx),
                                 a->dr > 0 ? u8(qr) : nullptr, a->dr > 0 ? u8(kr) : nullptr,
                                 lens.q ? u8(lens_q) : nullptr, lens.kv ? u8(lens_kv) : nullptr, u8(sinks), u8(out),
                                 u8(smax), u8(ssum), ws.data(), tiling_gm.data());
        });
    FillInfo(info, stats, tiling.result);
    return harness::kOk;
  });
}

int twin_sparse_flash_attention_grad(int dtype, const SfaArgs* a, const SparseFlashAttentionGradAttrArgs* raw,
                                     const void* q, const void* k, const void* v, const int32_t* idx,
                                     const void* d_out, const void* out, const float* smax, const float* ssum,
                                     const void* lens_q, const void* lens_kv, const void* qr, const void* kr,
                                     const float* sinks, void* dq, void* dk, void* dv, void* dqr, void* dkr,
                                     float* d_sinks, harness::RunInfo* info, char* err, int64_t err_len) {
  return harness::Guarded(err, err_len, [&]() -> int {
    const auto attrs = harness::ToAttrs(*raw);
    const HostLens lens(*a, attrs.layout, lens_q, lens_kv);
    const auto tiling = mgo::tiling::ComputeSparseFlashAttentionGradTiling(
        Shape(*a, attrs.layout, lens, sinks != nullptr), attrs, static_cast<DType>(dtype), lens.view, Platform(*a));
    if (harness::Refused(tiling.result, err, err_len)) return harness::kTilingError;
    const uint64_t q_rows = static_cast<uint64_t>(a->t1 * a->n1);
    const uint64_t k_rows = static_cast<uint64_t>(a->t2 * a->n2);
    std::vector<uint8_t> ws(AscendC::twin::kSysWorkspaceBytes + tiling.result.workspaceBytes, 0xFF);
    auto tiling_gm = harness::TilingBytes(tiling.result.data);
    harness::GmScope gm;
    RegisterShared(gm, *a, lens, SharedInputs{q, k, v, idx, qr, kr, lens_q, lens_kv, sinks});
    gm.Input(d_out, q_rows * a->d * 2, "d_out");
    gm.Input(out, q_rows * a->d * 2, "out");
    gm.Input(smax, q_rows * 4, "softmax_max");
    gm.Input(ssum, q_rows * 4, "softmax_sum");
    gm.Output(dq, q_rows * a->d * 2, "d_query");
    gm.Output(dk, k_rows * a->d * 2, "d_key");
    if (!a->value_absent) gm.Output(dv, k_rows * a->d * 2, "d_value");
    if (a->dr > 0) {
      gm.Output(dqr, q_rows * a->dr * 2, "d_query_rope");
      gm.Output(dkr, k_rows * a->dr * 2, "d_key_rope");
    }
    if (sinks != nullptr) gm.Output(d_sinks, static_cast<uint64_t>(a->n1) * 4, "d_sinks");
    gm.Workspace(ws.data(), ws.size(), "workspace");
    gm.Input(tiling_gm.data(), tiling_gm.size(), "tiling");
    auto u8 = [](const void* p) { return static_cast<GM_ADDR>(const_cast<void*>(p)); };
    const bool rope = a->dr > 0;
    const bool value = !a->value_absent;
    const auto stats = AscendC::twin::LaunchMix(
        tiling.result.data.usedAicNum, tiling.tilingKey, harness::ArchOf(a->arch),
        static_cast<uint64_t>(a->seed), [&] {
          sparse_flash_attention_grad(u8(q), u8(k), value ? u8(v) : nullptr, u8(idx), u8(d_out), u8(out), u8(smax), u8(ssum),
                                      lens.q ? u8(lens_q) : nullptr, lens.kv ? u8(lens_kv) : nullptr,
                                      rope ? u8(qr) : nullptr, rope ? u8(kr) : nullptr, u8(sinks), u8(dq),
                                      u8(dk), value ? u8(dv) : nullptr, rope ? u8(dqr) : nullptr,
                                      rope ? u8(dkr) : nullptr, sinks != nullptr ? u8(d_sinks) : nullptr, ws.data(),
                                      tiling_gm.data());
        });
    FillInfo(info, stats, tiling.result);
    return harness::kOk;
  });
}

}  // extern "C"
