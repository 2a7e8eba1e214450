// The two-source row geometry sparse_flash_mla and sparse_flash_mla_grad share (docs/contract.md section 8),
// host and device: the shapes of a launch (SmlaShape), the fields both tiling datas carry (SmlaGeo), the
// batches from CANN's lengths (cu_seqlens_* with the leading 0, seqused_*, cmp_residual_kv), the keys a query
// row may see (the original tokens' band as an interval [oriLo, oriHi), the compressed entries [0, cmpLimit))
// and the split of query rows over the AIVs.
//
// A "query row" is (token t, key group grp), row = t * N2 + grp, G = N1 / N2 heads. Length values live on the
// device: the same SmlaRow() runs in the kernels over the length tensors (smla_kernel_common.h: SmlaLensGm)
// and on the host over arrays when a caller knows them (SmlaLensHost: the twin harness, for balancing).
// Values are clamped so that no length can make a kernel read outside an input (the CPU op raises on them; an
// Ascend op cannot see device values on the host): a cumulative length into [previous, total], a used length
// into [0, available], a residual into [0, cmp_ratio).
// Plain C++17 over <cstdint>: compiles for the host tiling, the device and the CPU twin.
#pragma once

#include <cstdint>

#include "../../infer_shape/op_attrs.h"
#include "tiling_common.h"

namespace mgo::tiling {

using mgo::table::CmpMaskMode;
using mgo::table::Layout;
using mgo::table::OriMaskMode;

// The length inputs, in the table's order; bit i of SmlaGeo::lenMask says whether input i is given.
enum class SmlaLen : uint32_t { kCuQ = 0, kCuOri, kCuCmp, kUsedQ, kUsedOri, kUsedCmp, kResidual, kCount };
__aicore__ inline constexpr uint32_t SmlaLenBit(SmlaLen l) { return 1u << static_cast<uint32_t>(l); }

// Shapes as the op sees them. TND: batch = entries of cu_seqlens_q - 1, 0 when absent (one sequence of every
// token, laid out as BSND B = 1: the same memory and softmax_lse layout); s1/s2/s3 unused. BSND: batch = B,
// t = B * s (the padded rows per batch).
struct SmlaShape {
  Layout layout;
  uint64_t batch;
  uint64_t t1, t2, t3;  // query, ori_kv, cmp_kv rows (t3 = 0: no cmp_kv)
  uint64_t s1, s2, s3;
  uint64_t n1, n2, d;
  uint64_t kOri, kCmp;  // slots of ori/cmp_sparse_indices (0: absent)
  bool hasSinks;
  uint32_t lenMask;     // SmlaLenBit of every length input given
  bool hasCmp;          // cmp_kv given (it may have zero rows in a call where no batch has entries)
};

// What both kernels read about the geometry (the first member of either op's tiling data).
struct SmlaGeo {
  uint32_t layout;  // table::Layout, after normalisation (TND without cu_seqlens: BSND with B = 1)
  uint32_t batch;
  uint32_t t1, t2, t3;
  uint32_t s1, s2, s3;
  uint32_t n1, n2, g, d;
  uint32_t kOri, kCmp;
  uint32_t hasCmp, hasSinks;
  uint32_t lenMask;
  uint32_t ratio;
  int64_t oriMode;  // table::OriMaskMode
  int64_t cmpMode;  // table::CmpMaskMode
  int64_t winLeft, winRight;
  float scale;
};

// One batch on the flattened token axes: first row and rows used per source, and the original length the
// compressed causal rule counts from (maskLen: cmpLen * ratio + residual, or oriLen without cmp_residual_kv);
// then the rows each source holds for it (used + padding: the grad's key pass walks them).
struct SmlaBatch {
  uint64_t q0, qLen, ori0, oriLen, cmp0, cmpLen, maskLen;
  uint64_t qAvail, oriAvail, cmpAvail;
};

// One query row: its batch, local position, whether it is padding (beyond seqused_q: never read, out 0, lse
// 0), and the keys it may see: original tokens local [oriLo, oriHi) (empty when oriHi <= oriLo), compressed
// entries local [0, cmpLimit).
struct SmlaRow {
  uint32_t t, grp, b;
  uint64_t local;
  bool padding;
  SmlaBatch batch;
  int64_t oriLo, oriHi, cmpLimit;
};

// Host arrays of the length inputs (null: absent or unknown), as SmlaRow reads them.
struct SmlaLensHost {
  const int32_t* v[static_cast<uint32_t>(SmlaLen::kCount)];
  int64_t Get(SmlaLen l, uint32_t i) const { return v[static_cast<uint32_t>(l)][i]; }
};

__aicore__ inline bool SmlaHas(const SmlaGeo& g, SmlaLen l) { return (g.lenMask & SmlaLenBit(l)) != 0; }
__aicore__ inline bool SmlaTnd(const SmlaGeo& g) { return g.layout == static_cast<uint32_t>(Layout::kTND); }

__aicore__ inline int64_t SmlaClamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Start and available rows of batch b in one source (cu: its cumulative lengths; total: the source's rows;
// s: BSND rows per batch).
template <typename Lens>
__aicore__ inline void SmlaSpan(const SmlaGeo& g, const Lens& lens, SmlaLen cu, uint64_t s, uint64_t total,
                                uint32_t b, uint64_t* start, uint64_t* avail) {
  if (!SmlaTnd(g)) {
    *start = uint64_t{b} * s;
    *avail = s;
    return;
  }
  if (!SmlaHas(g, cu)) {  // one sequence of every row (CPU: the same)
    *start = 0;
    *avail = b == 0 ? total : 0;
    return;
  }
  const int64_t lo = SmlaClamp(lens.Get(cu, b), 0, static_cast<int64_t>(total));
  const int64_t hi = SmlaClamp(lens.Get(cu, b + 1), lo, static_cast<int64_t>(total));
  *start = static_cast<uint64_t>(lo);
  *avail = static_cast<uint64_t>(hi - lo);
}

__aicore__ inline uint64_t SmlaUsed(const SmlaGeo& g, int64_t value, SmlaLen used, uint64_t avail) {
  if (!SmlaHas(g, used)) return avail;
  return static_cast<uint64_t>(SmlaClamp(value, 0, static_cast<int64_t>(avail)));
}

template <typename Lens>
__aicore__ inline SmlaBatch SmlaBatchOf(const SmlaGeo& g, const Lens& lens, uint32_t b) {
  SmlaBatch r{};
  uint64_t av = 0;
  SmlaSpan(g, lens, SmlaLen::kCuQ, g.s1, g.t1, b, &r.q0, &av);
  r.qAvail = av;
  r.qLen = SmlaUsed(g, SmlaHas(g, SmlaLen::kUsedQ) ? lens.Get(SmlaLen::kUsedQ, b) : 0, SmlaLen::kUsedQ, av);
  SmlaSpan(g, lens, SmlaLen::kCuOri, g.s2, g.t2, b, &r.ori0, &av);
  r.oriAvail = av;
  r.oriLen = SmlaUsed(g, SmlaHas(g, SmlaLen::kUsedOri) ? lens.Get(SmlaLen::kUsedOri, b) : 0, SmlaLen::kUsedOri, av);
  if (g.hasCmp) {
    SmlaSpan(g, lens, SmlaLen::kCuCmp, g.s3, g.t3, b, &r.cmp0, &av);
    r.cmpAvail = av;
    r.cmpLen = SmlaUsed(g, SmlaHas(g, SmlaLen::kUsedCmp) ? lens.Get(SmlaLen::kUsedCmp, b) : 0, SmlaLen::kUsedCmp, av);
  }
  if (SmlaHas(g, SmlaLen::kResidual)) {
    const int64_t res = SmlaClamp(lens.Get(SmlaLen::kResidual, b), 0, static_cast<int64_t>(g.ratio) - 1);
    r.maskLen = r.cmpLen * g.ratio + static_cast<uint64_t>(res);
  } else {
    r.maskLen = r.oriLen;
  }
  return r;
}

// The batch holding row t of the source whose cumulative lengths are `cu` (kCuQ: query, kCuOri: ori_kv,
// kCuCmp: cmp_kv): BSND t / S of that source; TND the last batch whose cumulative start is <= t.
template <typename Lens>
__aicore__ inline uint32_t SmlaBatchOfRow(const SmlaGeo& g, const Lens& lens, SmlaLen cu, uint64_t t) {
  if (!SmlaTnd(g)) {
    const uint32_t s = cu == SmlaLen::kCuQ ? g.s1 : (cu == SmlaLen::kCuOri ? g.s2 : g.s3);
    return static_cast<uint32_t>(t / s);
  }
  uint32_t b = 0;
  while (b + 1 < g.batch && lens.Get(cu, b + 1) <= static_cast<int64_t>(t)) ++b;
  return b;
}

// The batch holding query token t.
template <typename Lens>
__aicore__ inline uint32_t SmlaBatchOfToken(const SmlaGeo& g, const Lens& lens, uint64_t t) {
  return SmlaBatchOfRow(g, lens, SmlaLen::kCuQ, t);
}

// The original tokens local query row `local` of batch `b` sees: [*lo, *hi) (empty when *hi <= *lo).
__aicore__ inline void SmlaOriBand(const SmlaGeo& g, const SmlaBatch& b, uint64_t local, int64_t* lo,
                                   int64_t* hi) {
  const int64_t ori_len = static_cast<int64_t>(b.oriLen);
  const int64_t thr = ori_len - static_cast<int64_t>(b.qLen) + static_cast<int64_t>(local) + 1;
  *lo = 0;
  *hi = ori_len;
  if (g.oriMode == static_cast<int64_t>(OriMaskMode::kRightDownCausal)) {
    *hi = thr < ori_len ? thr : ori_len;
  } else if (g.oriMode == static_cast<int64_t>(OriMaskMode::kBand)) {
    if (g.winLeft >= 0) *lo = thr - 1 - g.winLeft > 0 ? thr - 1 - g.winLeft : 0;
    if (g.winRight >= 0) *hi = thr + g.winRight < ori_len ? thr + g.winRight : ori_len;
  }
}

// The compressed entries local query row `local` of batch `b` sees: [0, limit).
__aicore__ inline int64_t SmlaCmpLimit(const SmlaGeo& g, const SmlaBatch& b, uint64_t local) {
  const int64_t cmp_len = static_cast<int64_t>(b.cmpLen);
  if (!g.hasCmp) return 0;
  if (g.cmpMode == static_cast<int64_t>(CmpMaskMode::kNoMask)) return cmp_len;
  const int64_t cthr = static_cast<int64_t>(b.maskLen) - static_cast<int64_t>(b.qLen) +
                       static_cast<int64_t>(local) + 1;
  const int64_t lim = cthr <= 0 ? 0 : cthr / static_cast<int64_t>(g.ratio);
  return lim < cmp_len ? lim : cmp_len;
}

// The first local query row of batch `b` whose band can reach local original token `key` (the bands' ends
// never fall as rows go on: the key pass starts its scan there).
__aicore__ inline uint64_t SmlaFirstOriRow(const SmlaGeo& g, const SmlaBatch& b, uint64_t key) {
  int64_t right = -1;  // unbounded
  if (g.oriMode == static_cast<int64_t>(OriMaskMode::kRightDownCausal)) right = 0;
  if (g.oriMode == static_cast<int64_t>(OriMaskMode::kBand)) right = g.winRight;
  if (right < 0) return 0;
  const int64_t s = static_cast<int64_t>(key) - right -
                    (static_cast<int64_t>(b.oriLen) - static_cast<int64_t>(b.qLen));  // hi(s) > key from here on
  return s > 0 ? static_cast<uint64_t>(s) : 0;
}

// The geometry of query row `row` (= t * N2 + grp) (docs/contract.md section 8, "the keys of query row t").
template <typename Lens>
__aicore__ inline SmlaRow SmlaRowOf(const SmlaGeo& g, const Lens& lens, uint32_t row) {
  SmlaRow r{};
  r.t = row / g.n2;
  r.grp = row % g.n2;
  r.b = SmlaBatchOfToken(g, lens, r.t);
  r.batch = SmlaBatchOf(g, lens, r.b);
  r.local = r.t - r.batch.q0;
  r.padding = r.t < r.batch.q0 || r.local >= r.batch.qLen;
  if (r.padding) return r;
  SmlaOriBand(g, r.batch, r.local, &r.oriLo, &r.oriHi);
  r.cmpLimit = SmlaCmpLimit(g, r.batch, r.local);
  return r;
}

// Element offset of (row, head 0 of its group) in softmax_lse: [N2, T1, G] (TND) or [B, N2, S1, G] (BSND).
__aicore__ inline uint64_t SmlaLseOffset(const SmlaGeo& g, uint32_t t, uint32_t grp) {
  if (SmlaTnd(g)) return (uint64_t{grp} * g.t1 + t) * g.g;
  const uint64_t b = t / g.s1;
  return ((b * g.n2 + grp) * g.s1 + t % g.s1) * g.g;
}
__aicore__ inline uint64_t SmlaLseOffset(const SmlaGeo& g, const SmlaRow& r) { return SmlaLseOffset(g, r.t, r.grp); }

// Upper bound of the keys of a row (balancing only): the band's width (or the ori slots), plus the visible
// compressed entries (or the cmp slots).
__aicore__ inline uint64_t SmlaRowKeyBound(const SmlaGeo& g, const SmlaRow& r) {
  if (r.padding) return 0;
  uint64_t n = r.oriHi > r.oriLo ? static_cast<uint64_t>(r.oriHi - r.oriLo) : 0;
  if (g.kOri > 0 && n > g.kOri) n = g.kOri;
  uint64_t c = static_cast<uint64_t>(r.cmpLimit);
  if (g.kCmp > 0 && c > g.kCmp) c = g.kCmp;
  return n + c;
}

// ---------------------------------------------------------------- host: shapes -> SmlaGeo, row split
// The checks of the shapes both tilings make; nullptr when they hold (the size limits are the table's,
// checked by each op's tiling with its own SparseFlashMla(Grad)Ascend limits).
inline const char* CheckSmlaShape(const SmlaShape& s) {
  if (s.n1 == 0 || s.n2 == 0 || s.n1 % s.n2 != 0) return "N1 must be a positive multiple of N2";
  if (s.d == 0 || s.d % 16 != 0) return "head dim D must be a positive multiple of 16 (32-byte rows)";
  if (s.layout == Layout::kBSND && (s.batch == 0 || s.t1 != s.batch * s.s1 || s.t2 != s.batch * s.s2 ||
                                    s.t3 != s.batch * s.s3)) {
    return "BSND: B must be positive and the rows B * S of every source";
  }
  if (s.t1 * s.n1 > UINT32_MAX || s.t2 * s.n2 > UINT32_MAX || s.t3 * s.n2 > UINT32_MAX || s.batch > 65535 ||
      s.kOri > 65535 || s.kCmp > 65535) {
    return "shape out of range (T*N < 2^32, B, K <= 65535)";
  }
  return nullptr;
}

// The platform, CheckSmlaShape, then the sizes' limits of either op's table (SparseFlashMla(Grad)Ascend: N2, D, N1
// and K when cmp_sparse_indices is given); nullptr when all hold.
template <typename Limits>
inline const char* CheckSmlaAscend(const SmlaShape& s, const CubePlatform& p) {
  const char* err = CheckCubePlatform(p);
  if (err == nullptr) err = CheckSmlaShape(s);
  if (err == nullptr) err = OutOfRange<typename Limits::N2>(s.n2);
  if (err == nullptr) err = OutOfRange<typename Limits::D>(s.d);
  if (err == nullptr) err = OutOfRange<typename Limits::N1>(s.n1);
  if (err == nullptr && s.kCmp > 0) err = OutOfRange<typename Limits::K>(s.kCmp);
  return err;
}

// The geometry fields from a checked shape and either op's attributes (SparseFlashMla(Grad)Attrs: the same
// fields). TND without cu_seqlens_q is one sequence: BSND with B = 1 (softmax_lse [1, N2, T1, G] = [N2, T1, G]).
template <typename Attrs>
inline SmlaGeo MakeSmlaGeo(const SmlaShape& s, const Attrs& a) {
  SmlaGeo g{};
  const bool one_seq = s.layout == Layout::kTND && s.batch == 0;
  g.layout = static_cast<uint32_t>(one_seq ? Layout::kBSND : s.layout);
  g.batch = static_cast<uint32_t>(one_seq ? 1 : s.batch);
  g.t1 = static_cast<uint32_t>(s.t1);
  g.t2 = static_cast<uint32_t>(s.t2);
  g.t3 = static_cast<uint32_t>(s.t3);
  g.s1 = static_cast<uint32_t>(one_seq ? s.t1 : s.s1);
  g.s2 = static_cast<uint32_t>(one_seq ? s.t2 : s.s2);
  g.s3 = static_cast<uint32_t>(one_seq ? s.t3 : s.s3);
  g.n1 = static_cast<uint32_t>(s.n1);
  g.n2 = static_cast<uint32_t>(s.n2);
  g.g = static_cast<uint32_t>(s.n1 / s.n2);
  g.d = static_cast<uint32_t>(s.d);
  g.kOri = static_cast<uint32_t>(s.kOri);
  g.kCmp = static_cast<uint32_t>(s.kCmp);
  g.hasCmp = s.hasCmp ? 1 : 0;
  g.hasSinks = s.hasSinks ? 1 : 0;
  // One sequence: the cumulative lengths are absent, so BSND's spans are the whole sources.
  g.lenMask = one_seq ? (s.lenMask & ~(SmlaLenBit(SmlaLen::kCuQ) | SmlaLenBit(SmlaLen::kCuOri) |
                                       SmlaLenBit(SmlaLen::kCuCmp)))
                      : s.lenMask;
  g.ratio = static_cast<uint32_t>(a.cmp_ratio);
  g.oriMode = static_cast<int64_t>(a.ori_mask_mode);
  g.cmpMode = static_cast<int64_t>(a.cmp_mask_mode);
  g.winLeft = a.ori_win_left;
  g.winRight = a.ori_win_right;
  g.scale = static_cast<float>(a.softmax_scale);
  return g;
}

// Whether `lens` holds every length input the geometry has (then rows can be weighed by their keys).
inline bool SmlaLensKnown(const SmlaGeo& g, const SmlaLensHost* lens) {
  if (lens == nullptr) return false;
  for (uint32_t i = 0; i < static_cast<uint32_t>(SmlaLen::kCount); ++i) {
    if ((g.lenMask & (1u << i)) != 0 && lens->v[i] == nullptr) return false;
  }
  return true;
}

inline constexpr uint64_t kSmlaRowOverheadKeys = 16;  // balance weight of a row with no key

// Splits the t1 * n2 query rows over `aiv` AIVs into contiguous ranges, start[0..aiv]: AIV i owns
// [start[i], start[i+1]). With every length known (`lens`, or BSND without length inputs), the ranges are
// balanced by kSmlaRowOverheadKeys + SmlaRowKeyBound (boundary i: the first row whose weight prefix reaches
// i * total / aiv); otherwise by row count. Depends on the shapes (and the known lengths) only.
inline void SplitSmlaRows(const SmlaGeo& g, const SmlaLensHost* lens, uint32_t aiv, uint32_t* start) {
  const uint64_t rows = uint64_t{g.t1} * g.n2;
  const SmlaLensHost none{};
  const bool known = g.lenMask == 0 || SmlaLensKnown(g, lens);
  if (!known) {
    SplitEvenly(rows, aiv, start);
    return;
  }
  const SmlaLensHost& l = lens != nullptr ? *lens : none;
  uint64_t total = 0;
  for (uint64_t row = 0; row < rows; ++row) {
    total += kSmlaRowOverheadKeys + SmlaRowKeyBound(g, SmlaRowOf(g, l, static_cast<uint32_t>(row)));
  }
  start[0] = 0;
  uint32_t next = 1;
  uint64_t prefix = 0;
  for (uint64_t row = 0; row < rows && next < aiv; ++row) {
    while (next < aiv && prefix * aiv >= total * next) start[next++] = static_cast<uint32_t>(row);
    prefix += kSmlaRowOverheadKeys + SmlaRowKeyBound(g, SmlaRowOf(g, l, static_cast<uint32_t>(row)));
  }
  while (next <= aiv) start[next++] = static_cast<uint32_t>(rows);
}

}  // namespace mgo::tiling
