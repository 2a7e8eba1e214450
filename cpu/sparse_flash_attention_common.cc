// See sparse_flash_attention_common.h.
#include "sparse_flash_attention_common.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "cann_strict.h"
#include "vector_math.h"

namespace mgo::cpu::sfa {

void fill_geometry(const char* op, const aot::KernelArgs& args, const Slots& s, Problem& p) {
  p.shared_kv = args.numel(s.v) == 0;
  const int r = p.bsnd ? 4 : 3;
  p.n1 = args.dim(s.q, r - 2);
  p.n2 = args.dim(s.k, r - 2);
  p.g = p.n1 / p.n2;
  p.d = args.dim(s.q, r - 1);
  p.dv = p.shared_kv ? p.d : args.dim(s.v, r - 1);
  p.dr = args.numel(s.qr) > 0 ? args.dim(s.qr, r - 1) : 0;
  p.dq = p.d + p.dr;
  p.k = args.dim(s.idx, r - 1);
  p.t1 = args.numel(s.q) / (p.n1 * p.d);
  p.t2 = args.numel(s.k) / (p.n2 * p.d);
  p.s1 = p.bsnd ? args.dim(s.q, 1) : 0;
  p.batches = read_batches(op, args, p.bsnd, p.bsnd ? args.dim(s.q, 0) : 0, p.t1, p.t2, s.lq, s.lkv,
                           "actual_seq_lengths_kv");
  p.row_batch = p.batches.row_batches(p.t1);
}

std::vector<int64_t> validate_indices(const char* op, const Problem& p, const int32_t* indices) {
  std::vector<int64_t> counts(static_cast<size_t>(p.t1 * p.n2), 0);
  const bool strict = cann_strict();
  std::vector<int32_t> seen;
  for (int64_t t = 0; t < p.t1; ++t) {
    const int64_t b = p.row_batch[t];
    if (b < 0) continue;  // a BSND padding row: its indices are never read
    const int64_t s2_len = p.batches.kv_len[b];
    const int64_t nblocks = (s2_len + p.bs - 1) / p.bs;
    const int64_t end = p.limit(t) + 1;
    const int64_t cann_slots = std::min(p.k, (std::max<int64_t>(end, 0) + p.bs - 1) / p.bs);
    for (int64_t grp = 0; grp < p.n2; ++grp) {
      const int32_t* row = indices + (t * p.n2 + grp) * p.k;
      int64_t count = 0;
      for (int64_t s = 0; s < p.k; ++s) {
        const int64_t i = row[s];
        if (i == -1) continue;
        if (i < -1 || i >= nblocks) {
          throw std::runtime_error(std::string(op) + ": sparse_indices value " + std::to_string(i) + " at row " +
                                   std::to_string(t) + ", group " + std::to_string(grp) + ", slot " +
                                   std::to_string(s) + " is out of range [-1, " + std::to_string(nblocks) +
                                   ") (batch " + std::to_string(b) + " has " + std::to_string(s2_len) +
                                   " keys, sparse_block_size " + std::to_string(p.bs) + ")");
        }
        const int64_t lo = i * p.bs;
        const int64_t hi = std::min(lo + p.bs, end);
        if (hi > lo) count += hi - lo;
      }
      if (strict) check_cann_row(op, row, p.k, cann_slots, t, grp, seen);
      counts[t * p.n2 + grp] = count;
    }
  }
  return counts;
}

void append_visible_keys(const Problem& p, const int32_t* indices, int64_t t, int64_t grp,
                         std::vector<int32_t>& keys) {
  const int64_t end = p.limit(t) + 1;
  if (end <= 0) return;  // nothing visible (a BSND padding row included: its indices are never read)
  const int64_t kv0 = p.key_start(t);
  const int32_t* row = indices + (t * p.n2 + grp) * p.k;
  for (int64_t s = 0; s < p.k; ++s) {
    const int64_t i = row[s];
    if (i < 0) continue;
    const int64_t hi = std::min(i * p.bs + p.bs, end);
    for (int64_t j = i * p.bs; j < hi; ++j) keys.push_back(static_cast<int32_t>(kv0 + j));
  }
}

// --- vectorised helpers ------------------------------------------------------------------------
// Explicit 16 lanes combined in a fixed order keep reductions vectorisable without -ffast-math
// and bitwise reproducible.
namespace {

constexpr int64_t kLanes = 16;

// 8 float32 lanes as a GCC vector (one ymm in the AVX2 and AVX-512 clones, two xmm in the default
// one). Every exp here runs on these (vmath::exp of vector_math.h): GCC keeps the NaN-preserving
// clamps of a scalar exp as branches in this file. Not 16 lanes: GCC lowers the compares and
// selects of a 64-byte vector to scalar code on AVX2 (~30 ns per exp, measured).
// (Every use is inlined into a clone, so the psabi note on passing such vectors is moot.)
#pragma GCC diagnostic ignored "-Wpsabi"
constexpr int64_t kVec = 8;
using vmath::V8;

[[gnu::always_inline]] inline V8 load8(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline void store8(float* p, const V8& v) { std::memcpy(p, &v, sizeof v); }
[[gnu::always_inline]] inline V8 splat(float x) { return V8{} + x; }

}  // namespace

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
float row_max(const float* x, int64_t n, const float* w) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float acc[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) acc[l] = kNegInf;
  int64_t i = 0;
  if (w == nullptr) {
    for (; i + kLanes <= n; i += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) acc[l] = max_keep_nan(acc[l], x[i + l]);
    }
    for (int64_t l = 0; i + l < n; ++l) acc[l] = max_keep_nan(acc[l], x[i + l]);
  } else {
    for (; i + kLanes <= n; i += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) acc[l] = max_keep_nan(acc[l], w[i + l] != 0.0f ? x[i + l] : kNegInf);
    }
    for (int64_t l = 0; i + l < n; ++l) acc[l] = max_keep_nan(acc[l], w[i + l] != 0.0f ? x[i + l] : kNegInf);
  }
  float m = acc[0];
  for (int64_t l = 1; l < kLanes; ++l) m = max_keep_nan(m, acc[l]);
  return m;
}

namespace {

// Weighted exp: a weight-0 key gives exactly 0 even when its score is NaN or +-Inf.
[[gnu::always_inline]] inline V8 weigh(const V8& e, const V8& w) { return w != 0.0f ? e * w : splat(0.0f); }

// Lanes [0, rem) of x and of w (1 when w is null) in kVec-lane buffers; the lanes after weigh 0.
[[gnu::always_inline]] inline void load_tail(const float* x, const float* w, int64_t rem, float* xb, float* wb) {
  std::memcpy(xb, x, sizeof(float) * rem);
  if (w != nullptr) {
    std::memcpy(wb, w, sizeof(float) * rem);
  } else {
    std::fill(wb, wb + rem, 1.0f);
  }
}

// exp_shift_sum with or without weights (a template so each loop vectorises without a branch;
// always_inline so every target clone compiles its own copy).
template <bool kWeighted>
[[gnu::always_inline]] inline float exp_shift_sum_impl(float* x, int64_t n, int64_t npad, float m, const float* w) {
  V8 acc = splat(0.0f);
  int64_t i = 0;
  for (; i + kVec <= n; i += kVec) {
    V8 e = vmath::exp(load8(x + i) - m);
    if constexpr (kWeighted) e = weigh(e, load8(w + i));
    store8(x + i, e);
    acc += e;
  }
  if (i < n) {
    float xb[kVec] = {}, wb[kVec] = {};
    load_tail(x + i, kWeighted ? w + i : nullptr, n - i, xb, wb);
    const V8 e = weigh(vmath::exp(load8(xb) - m), load8(wb));
    store8(xb, e);
    std::memcpy(x + i, xb, sizeof(float) * (n - i));
    acc += e;
  }
  for (int64_t j = n; j < npad; ++j) x[j] = 0.0f;
  float lanes[kVec];
  store8(lanes, acc);
  float sum = 0.0f;
  for (int64_t l = 0; l < kVec; ++l) sum += lanes[l];  // fixed order
  return sum;
}

}  // namespace

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
float exp_shift_sum(float* x, int64_t n, int64_t npad, float m, const float* w) {
  return w == nullptr ? exp_shift_sum_impl<false>(x, n, npad, m, w) : exp_shift_sum_impl<true>(x, n, npad, m, w);
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void scale_row(float* x, int64_t n, float a) {
  for (int64_t j = 0; j < n; ++j) x[j] *= a;
}

namespace {

// P and dS of 8 keys (see probs_and_grad); s <- p, dp <- ds.
template <bool kWeighted>
[[gnu::always_inline]] inline void probs_and_grad8(V8& s, V8& dp, const V8& w, float m, float inv_l,
                                                    float delta) {
  const V8 p = vmath::exp(s - m) * inv_l;
  if constexpr (kWeighted) {
    s = weigh(p, w);
    dp = w != 0.0f ? s * (dp - delta) : splat(0.0f);
  } else {
    s = p;
    dp = p * (dp - delta);
  }
}

template <bool kWeighted>
[[gnu::always_inline]] inline void probs_and_grad_impl(float* s, float* dp, int64_t n, int64_t npad, float m,
                                                       float inv_l, float delta, const float* w) {
  int64_t j = 0;
  for (; j + kVec <= n; j += kVec) {
    V8 sv = load8(s + j), dv = load8(dp + j);
    probs_and_grad8<kWeighted>(sv, dv, kWeighted ? load8(w + j) : V8{}, m, inv_l, delta);
    store8(s + j, sv);
    store8(dp + j, dv);
  }
  if (j < n) {
    float sb[kVec] = {}, db[kVec] = {}, wb[kVec] = {};
    load_tail(s + j, kWeighted ? w + j : nullptr, n - j, sb, wb);
    std::memcpy(db, dp + j, sizeof(float) * (n - j));
    V8 sv = load8(sb), dv = load8(db);
    probs_and_grad8<true>(sv, dv, load8(wb), m, inv_l, delta);
    store8(sb, sv);
    store8(db, dv);
    std::memcpy(s + j, sb, sizeof(float) * (n - j));
    std::memcpy(dp + j, db, sizeof(float) * (n - j));
  }
  for (j = n; j < npad; ++j) {
    s[j] = 0.0f;
    dp[j] = 0.0f;
  }
}

}  // namespace

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void probs_and_grad(float* s, float* dp, int64_t n, int64_t npad, float m, float inv_l, float delta,
                    const float* w) {
  if (w == nullptr) {
    probs_and_grad_impl<false>(s, dp, n, npad, m, inv_l, delta, w);
  } else {
    probs_and_grad_impl<true>(s, dp, n, npad, m, inv_l, delta, w);
  }
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
float dot(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (int64_t l = 0; i + l < n; ++l) acc[l] += a[i + l] * b[i + l];
  float s = 0.0f;
  for (int64_t l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void add_to(float* acc, const float* x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] += x[j];
}

}  // namespace mgo::cpu::sfa
