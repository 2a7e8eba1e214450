// The sequence geometry the attention and indexer tilings share (sparse_flash_attention(_grad),
// lightning_indexer(_grad), sparse_lightning_indexer_grad_kl_loss): query and key tokens in BSND or
// TND (docs/contract.md section 0.2), batches from the shape or the known cumulative lengths, and
// the split of query rows over the AIVs balanced by each row's visible-key bound.
// Plain C++17 over <cstdint>: compiles for the host tiling, the device and the CPU twin.
#pragma once

#include <cstdint>

#include "../../infer_shape/op_attrs.h"
#include "tiling_common.h"

namespace mgo::tiling {

using mgo::table::Layout;
using mgo::table::SparseMode;

inline constexpr uint32_t kRowOverheadKeys = 16;  // balance weight of a row with no key

// Tokens as the op sees them. BSND: batch = B, s1/s2 = S1/S2, t1 = B*S1, t2 = B*S2.
// TND: batch = entries of actual_seq_lengths_*, s1/s2 unused (0), t1/t2 = T1/T2; batch = 0 means
// the lengths are absent (zero-size placeholder or no tensor): one sequence of T1 queries and
// T2 keys, which the tilings lay out as BSND with B = 1 (same memory and statistics layout).
struct SeqShape {
  Layout layout;
  uint64_t batch;
  uint64_t s1;
  uint64_t s2;
  uint64_t t1;
  uint64_t t2;
};

// Cumulative TND lengths (no leading 0) when the host knows their values, for balancing rows
// by visible keys; {nullptr, nullptr, 0} when not (the split is then by rows).
struct SeqLengths {
  const int64_t* q;
  const int64_t* kv;
  uint64_t count;
};

// The checks of the token geometry every sequence tiling makes; nullptr when it holds.
inline const char* CheckSeqShape(const SeqShape& s) {
  if (s.batch == 0 && s.layout == Layout::kBSND) return "batch must be positive";
  if (s.layout == Layout::kBSND && (s.t1 != s.batch * s.s1 || s.t2 != s.batch * s.s2)) {
    return "BSND: t1/t2 must equal B*S1/B*S2";
  }
  return nullptr;
}

// TND without lengths is one sequence: the same problem as BSND with B = 1.
inline SeqShape Normalised(const SeqShape& shape) {
  SeqShape s = shape;
  if (s.layout == Layout::kTND && s.batch == 0) {
    s.layout = Layout::kBSND;
    s.batch = 1;
    s.s1 = s.t1;
    s.s2 = s.t2;
  }
  return s;
}

// Copies the sequence fields every sequence tiling data holds from a normalised shape (the
// layout as the tiling data carries it: the table enum's value).
template <typename TilingData>
inline void SetSeqFields(TilingData& t, const SeqShape& s) {
  t.layout = static_cast<uint32_t>(s.layout);
  t.batch = static_cast<uint32_t>(s.batch);
  t.s1 = static_cast<uint32_t>(s.s1);
  t.s2 = static_cast<uint32_t>(s.s2);
  t.t1 = static_cast<uint32_t>(s.t1);
  t.t2 = static_cast<uint32_t>(s.t2);
}

// Upper bound of visible keys of local query row s1 in a batch of (S1_b, S2_b): the causal
// limit (rightDownCausal) and `selected` = K * bs keys. Exact when every slot selects a distinct
// fully visible block; used only for balancing.
__aicore__ inline uint64_t RowKeyBound(uint64_t s1, uint64_t s1_len, uint64_t s2_len, SparseMode mode,
                                       uint64_t selected) {
  uint64_t visible = s2_len;
  if (mode == SparseMode::kRightDownCausal) {
    // s2 <= s1 + S2 - S1  <=>  s2 + S1 <= s1 + S2
    if (s1 + s2_len < s1_len) return 0;
    const uint64_t lim = s1 + s2_len - s1_len + 1;
    visible = lim < s2_len ? lim : s2_len;
  }
  return visible < selected ? visible : selected;
}

// Compressed keys (docs/contract.md section 9.1): how many of a batch's S2_b compressed keys local
// query row s1 of S1_b sees under rightDownCausal, with `ratio` original tokens per key and `residual`
// original tokens in the batch's last, incomplete block (its original key length S2_b * ratio +
// residual): floor((S2_b * ratio + residual - S1_b + s1 + 1) / ratio), capped to [0, S2_b]. A key is
// visible once every original token it pools is. The one statement of the rule for every indexer
// tiling and kernel; ratio 1 with residual 0 gives RowKeyBound's causal count (the same integers).
__aicore__ inline uint64_t CmpVisibleKeys(uint64_t s1, uint64_t s1_len, uint64_t s2_len, uint64_t ratio,
                                          uint64_t residual) {
  const uint64_t seen = s2_len * ratio + residual + s1 + 1;  // the numerator + S1_b, never negative
  if (seen <= s1_len) return 0;
  const uint64_t n = (seen - s1_len) / ratio;
  return n < s2_len ? n : s2_len;
}

// (S1_b, S2_b) and the first query token of batch b, from the shape or the known lengths.
struct BatchSpan {
  uint64_t q0;
  uint64_t s1;
  uint64_t s2;
};

inline BatchSpan SpanOf(const SeqShape& s, const SeqLengths& lens, uint64_t b) {
  if (s.layout == Layout::kBSND) return BatchSpan{b * s.s1, s.s1, s.s2};
  const int64_t q_prev = b == 0 ? 0 : lens.q[b - 1];
  const int64_t kv_prev = b == 0 ? 0 : lens.kv[b - 1];
  return BatchSpan{static_cast<uint64_t>(q_prev), static_cast<uint64_t>(lens.q[b] - q_prev),
                   static_cast<uint64_t>(lens.kv[b] - kv_prev)};
}

inline bool LengthsKnown(const SeqShape& s, const SeqLengths& lens) {
  if (s.layout == Layout::kBSND) return true;
  if (lens.q == nullptr || lens.kv == nullptr || lens.count != s.batch) return false;
  int64_t pq = 0;
  int64_t pkv = 0;
  for (uint64_t b = 0; b < lens.count; ++b) {
    if (lens.q[b] < pq || lens.kv[b] < pkv) return false;
    pq = lens.q[b];
    pkv = lens.kv[b];
  }
  return static_cast<uint64_t>(pq) == s.t1 && static_cast<uint64_t>(pkv) == s.t2;
}

// What a query row's work is bounded by: the mask and the keys its slots can select (K * bs).
struct RowWork {
  SparseMode mode;
  uint64_t selected;
  uint64_t cmpRatio = 1;  // compressed keys (section 9.1): original tokens per key; residuals taken as 0
};

// A row's balance bound under `work` (RowKeyBound, or the compressed rule where cmpRatio > 1).
__aicore__ inline uint64_t RowWorkBound(const RowWork& work, uint64_t s1, uint64_t s1_len, uint64_t s2_len) {
  if (work.cmpRatio <= 1 || work.mode != SparseMode::kRightDownCausal) {
    return RowKeyBound(s1, s1_len, s2_len, work.mode, work.selected);
  }
  const uint64_t visible = CmpVisibleKeys(s1, s1_len, s2_len, work.cmpRatio, 0);
  return visible < work.selected ? visible : work.selected;
}

// Splits the t1 * n2 query rows of a normalised shape over `aiv` AIVs into contiguous ranges
// whose weights (kRowOverheadKeys + the visible-key bound) stay within one row of the mean:
// boundary i is the first row whose weight prefix reaches i * total / aiv. Without known lengths
// the split is by row count.
inline void SplitQueryRows(const SeqShape& s, uint64_t n2, const RowWork& work, const SeqLengths& lens, uint32_t aiv,
                           uint32_t* start) {
  const uint64_t rows = s.t1 * n2;
  start[0] = 0;
  if (!LengthsKnown(s, lens)) {
    const RowSplit split = SplitRows(rows, aiv);
    for (uint32_t i = 0; i < aiv; ++i) {
      const RowRange r = i < split.usedCoreNum ? CoreRows(split.rowsPerCore, split.rowsRemainder, i)
                                               : RowRange{rows, 0};
      start[i + 1] = static_cast<uint32_t>(r.start + r.count);
    }
    return;
  }
  const auto weight = [&](const BatchSpan& span, uint64_t local) {
    return kRowOverheadKeys + RowWorkBound(work, local, span.s1, span.s2);
  };
  uint64_t total = 0;
  for (uint64_t b = 0; b < s.batch; ++b) {
    const BatchSpan span = SpanOf(s, lens, b);
    for (uint64_t i = 0; i < span.s1; ++i) total += n2 * weight(span, i);
  }
  uint32_t next = 1;
  uint64_t prefix = 0;
  uint64_t row = 0;
  for (uint64_t b = 0; b < s.batch && next < aiv; ++b) {
    const BatchSpan span = SpanOf(s, lens, b);
    for (uint64_t i = 0; i < span.s1 && next < aiv; ++i) {
      const uint64_t w = weight(span, i);
      for (uint64_t g = 0; g < n2; ++g) {
        // Close ranges whose target the prefix already reached (before adding this row).
        while (next < aiv && prefix * aiv >= total * next) start[next++] = static_cast<uint32_t>(row);
        prefix += w;
        ++row;
      }
    }
  }
  while (next <= aiv) start[next++] = static_cast<uint32_t>(rows);
}

}  // namespace mgo::tiling
