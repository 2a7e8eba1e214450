// Shared pieces of the sparse flash attention CPU kernels (docs/contract.md section 3): the problem geometry
// (layouts, batches, statistics layout), index validation, the visible-key list of a query row,
// tile gathers, and the vectorised softmax helpers.
//
// GEMM operands are float32 or raw bf16 tiles (operand.h); softmax, statistics and reductions
// are float32.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "../infer_shape/op_table.h"
#include "aot.h"
#include "convert.h"
#include "gemm.h"
#include "operand.h"
#include "seq_lengths.h"

namespace mgo::cpu::sfa {

// Keys are processed in blocks of at most this many rows (online softmax in the forward,
// independent blocks in the backward), so scratch is O(rows * G * kBlock) per thread. A fixed block
// keeps the GEMM shapes to kBlock / kKeyPad per product whatever K is, which bounds oneDNN's
// per-thread cache of bf16 matmul primitives (one per shape, ~100 KB each).
constexpr int64_t kBlock = 256;
// GEMM shapes are rounded up to this many keys (zero-filled) so the cached bf16 primitives repeat.
constexpr int64_t kKeyPad = 64;

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Geometry of one launch. Query rows and key rows are counted on the flattened token axis
// (BSND: row = b * S + s).
struct Problem {
  bool bsnd = false;
  int64_t t1 = 0, t2 = 0;      // query rows, key rows
  int64_t n1 = 0, n2 = 0, g = 0;
  int64_t d = 0, dr = 0, dq = 0, dv = 0;  // D, Dr, D + Dr, value D
  int64_t k = 0;               // index slots per row
  bool shared_kv = false;      // value absent: key is value (DeepSeek's shared latent KV)
  int64_t bs = 1;
  table::SparseMode mode = table::SparseMode::kRightDownCausal;
  float scale = 1.0f;
  int64_t s1 = 0;              // BSND: padded query rows per batch
  Batches batches;             // per batch: first row and length of its queries and keys
  std::vector<int32_t> row_batch;  // batch of every query row, -1 for a BSND padding row

  // Offset of (row t, key group n2, head 0 of the group) in softmax_max/softmax_sum.
  int64_t stats_offset(int64_t t, int64_t grp) const {
    if (!bsnd) return (grp * t1 + t) * g;
    return ((t / s1 * n2 + grp) * s1 + t % s1) * g;
  }
  // Last visible local key of row t (< 0: nothing visible, a padding row included).
  int64_t limit(int64_t t) const {
    const int64_t b = row_batch[t];
    if (b < 0) return -1;
    const int64_t s1_len = batches.q_len[b];
    const int64_t s2_len = batches.kv_len[b];
    if (mode == table::SparseMode::kNoMask) return s2_len - 1;
    const int64_t causal = (t - batches.q0[b]) + s2_len - s1_len;
    return causal < s2_len - 1 ? causal : s2_len - 1;
  }
  // First key row of the batch of query row t (a query row of some batch).
  int64_t key_start(int64_t t) const { return batches.kv0[row_batch[t]]; }
};

// Parameter positions of the inputs both kernels share.
struct Slots {
  int q, k, v, idx, qr, kr, lq, lkv, sinks;
};

// The Slots of `Op` (table::SparseFlashAttention or table::SparseFlashAttentionGrad: the two name
// these inputs alike, in different slots).
template <class Op>
constexpr Slots slots_of() {
  using In = typename Op::In;
  return {In::kQuery,     In::kKey,     In::kValue,                 In::kSparseIndices,
          In::kQueryRope, In::kKeyRope, In::kActualSeqLengthsQuery, In::kActualSeqLengthsKv, In::kSinks};
}

// The inputs both kernels read: value is key when absent (key is value), the ropes and sinks null
// when absent.
template <typename T>
struct Inputs {
  Inputs(const aot::KernelArgs& args, const Problem& p, const Slots& s)
      : query(args.as<const T>(s.q)),
        key(args.as<const T>(s.k)),
        value(p.shared_kv ? key : args.as<const T>(s.v)),
        query_rope(p.dr > 0 ? args.as<const T>(s.qr) : nullptr),
        key_rope(p.dr > 0 ? args.as<const T>(s.kr) : nullptr),
        indices(args.as<const int32_t>(s.idx)),
        sinks(args.numel(s.sinks) > 0 ? args.as<const float>(s.sinks) : nullptr),
        // Key is value (absent value, or one tensor passed twice): V is the first dv columns of the key tile.
        v_in_k(static_cast<const void*>(value) == static_cast<const void*>(key) && p.dv <= p.d) {}

  const T *query, *key, *value, *query_rope, *key_rope;
  const int32_t* indices;
  const float* sinks;  // [N1] sink logits (docs/contract.md section 0.7), or null
  bool v_in_k;

  // The sink logit of query head h; -inf (no sink) when sinks are absent.
  float sink(int64_t head) const { return sinks != nullptr ? sinks[head] : -std::numeric_limits<float>::infinity(); }
};

// Fills the geometry of `p` from the launch arguments; an absent (zero-size) value means key is
// value, absent ropes mean Dr = 0. Throws std::runtime_error naming `op` on bad length values.
void fill_geometry(const char* op, const aot::KernelArgs& args, const Slots& s, Problem& p);

// The problem of one launch, from the attributes both ops have (their table Attrs name them alike).
template <class Attrs>
Problem make_problem(const char* op, const aot::KernelArgs& args, const Attrs& attrs, const Slots& s) {
  Problem p;
  p.bsnd = attrs.layout == table::Layout::kBSND;
  p.bs = attrs.sparse_block_size;
  p.mode = attrs.sparse_mode;
  p.scale = static_cast<float>(attrs.scale_value);
  fill_geometry(op, args, s, p);
  return p;
}

// Checks every index (-1 or a block of its batch) and returns the number of visible keys of
// every (row, group), [t1 * n2]. Throws std::runtime_error naming `op` on the first bad index.
std::vector<int64_t> validate_indices(const char* op, const Problem& p, const int32_t* indices);

// Appends the global key rows visible to (row t, group grp) to `keys`, in slot order.
void append_visible_keys(const Problem& p, const int32_t* indices, int64_t t, int64_t grp,
                         std::vector<int32_t>& keys);
// Same into a cleared `keys`.
inline void visible_keys(const Problem& p, const int32_t* indices, int64_t t, int64_t grp,
                         std::vector<int32_t>& keys) {
  keys.clear();
  append_visible_keys(p, indices, t, grp, keys);
}

// Gathers key rows `keys[0..n)` of group grp into tile [npad, dq] (key | key_rope), zero rows
// after n; same for value into [npad, dv] unless `vt` is null.
template <typename T, typename Op>
void gather_keys(const Problem& p, const T* key, const T* key_rope, const T* value, const int32_t* keys, int64_t n,
                 int64_t npad, int64_t grp, Op* kt, Op* vt) {
  for (int64_t r = 0; r < n; ++r) {
    const int64_t row = static_cast<int64_t>(keys[r]) * p.n2 + grp;
    to_operand(key + row * p.d, kt + r * p.dq, p.d);
    if (p.dr > 0) to_operand(key_rope + row * p.dr, kt + r * p.dq + p.d, p.dr);
    if (vt != nullptr) to_operand(value + row * p.dv, vt + r * p.dv, p.dv);
  }
  std::memset(static_cast<void*>(kt + n * p.dq), 0, sizeof(Op) * (npad - n) * p.dq);
  if (vt != nullptr) std::memset(static_cast<void*>(vt + n * p.dv), 0, sizeof(Op) * (npad - n) * p.dv);
}

// One thread's key tiles of a block: Kf [kBlock, dq] (key | key_rope) and V [kBlock, dv], or V read
// from the first dv columns of Kf when key is value.
template <typename Op>
class KeyTiles {
 public:
  KeyTiles(const Problem& p, bool v_in_k) : v_in_k_(v_in_k), kt_(kBlock * p.dq), vt_(v_in_k ? 0 : kBlock * p.dv) {}

  // Gathers keys[0..nc) of group grp (zero rows up to ncp) and writes the scores
  // S [m, ncp] = scale * Q [m, dq] . Kf^T.
  template <typename T>
  void gather_and_score(const Problem& p, const Inputs<T>& in, const int32_t* keys, int64_t nc, int64_t ncp,
                        int64_t grp, const Op* q, int64_t m, float* s) {
    gather_keys(p, in.key, in.key_rope, in.value, keys, nc, ncp, grp, kt_.data(), v_in_k_ ? nullptr : vt_.data());
    mm(gemm::Trans::kNo, gemm::Trans::kYes, m, ncp, p.dq, p.scale, q, p.dq, kt_.data(), p.dq, 0.0f, s, ncp);
  }
  const Op* kf() const { return kt_.data(); }
  const Op* v() const { return v_in_k_ ? kt_.data() : vt_.data(); }
  // Leading dimension of v().
  int64_t ldv(const Problem& p) const { return v_in_k_ ? p.dq : p.dv; }

 private:
  bool v_in_k_;
  std::vector<Op> kt_, vt_;
};

// Query-side tile of (row t, group grp): [G, dq] from x [.., N1, D] and x_rope [.., N1, Dr].
template <typename T, typename Op>
void gather_heads(const Problem& p, const T* x, const T* x_rope, int64_t t, int64_t grp, Op* tile) {
  for (int64_t h = 0; h < p.g; ++h) {
    const int64_t head = t * p.n1 + grp * p.g + h;
    to_operand(x + head * p.d, tile + h * p.dq, p.d);
    if (p.dr > 0) to_operand(x_rope + head * p.dr, tile + h * p.dq + p.d, p.dr);
  }
}

// --- vectorised float32 helpers (sparse_flash_attention_common.cc) -----------------------------

// max(a, b) that keeps a NaN from either side (std::max and `a > b ? a : b` drop one of them).
inline float max_keep_nan(float a, float b) { return a > b || a != a ? a : b; }

// The optional w[0..n) are key weights of a row group (sparse_flash_attention_groups.h): a key of
// weight 0 is skipped exactly (whatever its score), weight c counts c times. nullptr: all 1.

// max of x[0..n) over keys of nonzero weight (-inf if none); NaN if any of them is NaN, as IEEE
// arithmetic would give.
float row_max(const float* x, int64_t n, const float* w = nullptr);
// x[j] <- w[j] exp(x[j] - m) for j < n, 0 for n <= j < npad; returns the float32 sum (fixed order).
float exp_shift_sum(float* x, int64_t n, int64_t npad, float m, const float* w = nullptr);
// x[j] <- x[j] * a for j < n.
void scale_row(float* x, int64_t n, float a);
// p[j] <- w[j] exp(s[j] - m) inv_l; ds[j] <- p[j] (dp[j] - delta) (j < n); both 0 for n <= j < npad
// and where w[j] == 0. s is overwritten with p, dp with ds.
void probs_and_grad(float* s, float* dp, int64_t n, int64_t npad, float m, float inv_l, float delta,
                    const float* w = nullptr);
// sum_j a[j] * b[j] in float32 (fixed order).
float dot(const float* a, const float* b, int64_t n);
// acc[j] += x[j].
void add_to(float* acc, const float* x, int64_t n);

}  // namespace mgo::cpu::sfa
