// Shared pieces of the sparse_flash_mla CPU kernels (docs/contract.md section 8): the launch geometry (layouts,
// CANN's lengths per source, the masks of both key sources) and the key list of one (query row, key group).
//
// A row's keys are listed by global row, the original tokens as [0, T2) and the compressed entries as
// T2 + [0, T3) (no concatenated KV is ever built: the tiles gather from the source a key names). The band of
// original tokens is an interval [lo, hi) per row, never index slots; compressed entries come from
// cmp_sparse_indices (CSA) or are every entry below the causal limit (HCA).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "../infer_shape/op_table.h"
#include "aot.h"
#include "operand.h"

namespace mgo::cpu::smla {

// Keys are processed in blocks of at most kBlock rows; GEMM shapes are padded to kKeyPad keys.
constexpr int64_t kBlock = 256;
constexpr int64_t kKeyPad = 64;
inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Parameter positions of the inputs both kernels share.
struct Slots {
  int q, ori, cmp, ori_idx, cmp_idx, cu_q, cu_ori, cu_cmp, used_q, used_ori, used_cmp, residual, sinks;
};

template <class Op>
constexpr Slots slots_of() {
  using In = typename Op::In;
  return {In::kQuery,       In::kOriKv,          In::kCmpKv,        In::kOriSparseIndices, In::kCmpSparseIndices,
          In::kCuSeqlensQ,  In::kCuSeqlensOriKv, In::kCuSeqlensCmpKv, In::kSequsedQ,     In::kSequsedOriKv,
          In::kSequsedCmpKv, In::kCmpResidualKv, In::kSinks};
}

// One batch: its query, original and compressed rows on the flattened token axes, and L, the original
// length the compressed causal rule counts from (cmp_len * cmp_ratio + residual, or ori_len without
// cmp_residual_kv).
struct Batch {
  int64_t q0 = 0, q_len = 0, ori0 = 0, ori_len = 0, cmp0 = 0, cmp_len = 0, mask_len = 0;
};

struct Problem {
  bool bsnd = false;
  int64_t t1 = 0, t2 = 0, t3 = 0;  // query, original and compressed rows (BSND: B * S)
  int64_t n1 = 0, n2 = 0, g = 0, d = 0;
  int64_t k_ori = 0, k_cmp = 0;    // slots of the index inputs (0: absent)
  bool has_cmp = false;
  float scale = 1.0f;
  int64_t ratio = 1, win_left = 0, win_right = 0;
  table::OriMaskMode ori_mode = table::OriMaskMode::kBand;
  table::CmpMaskMode cmp_mode = table::CmpMaskMode::kRightDownCausal;
  int64_t s1 = 0;                  // BSND: padded query rows per batch
  std::vector<Batch> batches;
  std::vector<int32_t> row_batch;  // batch of every query row, -1 for a row of no batch (padding)

  // Offset of (row t, key group grp, head 0 of the group) in softmax_lse.
  int64_t lse_offset(int64_t t, int64_t grp) const {
    if (!bsnd) return (grp * t1 + t) * g;
    return ((t / s1 * n2 + grp) * s1 + t % s1) * g;
  }
  // The original tokens row t may see, local [lo, hi) (empty: hi <= lo). Row t of a batch.
  void ori_range(int64_t t, int64_t& lo, int64_t& hi) const;
  // The compressed entries row t may see: local [0, limit).
  int64_t cmp_limit(int64_t t) const;
};

// The geometry of one launch from its arguments and the attributes both ops have. Throws
// std::runtime_error naming `op` on bad length values.
template <class Attrs>
Problem make_problem(const char* op, const aot::KernelArgs& args, const Attrs& attrs, const Slots& s);
void fill_geometry(const char* op, const aot::KernelArgs& args, const Slots& s, Problem& p);

template <class Attrs>
Problem make_problem(const char* op, const aot::KernelArgs& args, const Attrs& attrs, const Slots& s) {
  Problem p;
  p.bsnd = attrs.layout == table::Layout::kBSND;
  p.scale = static_cast<float>(attrs.softmax_scale);
  p.ratio = attrs.cmp_ratio;
  p.ori_mode = attrs.ori_mask_mode;
  p.cmp_mode = attrs.cmp_mask_mode;
  p.win_left = attrs.ori_win_left;
  p.win_right = attrs.ori_win_right;
  fill_geometry(op, args, s, p);
  return p;
}

// The key list of one (row, group): global rows (original: [0, T2), compressed: T2 + [0, T3)) in order (the
// original tokens, then the compressed entries) and the index slot each came from (-1: the band or HCA).
struct RowKeys {
  std::vector<int32_t> rows, slots;
  int64_t n_ori = 0;  // the first n_ori keys are original tokens
  int64_t size() const { return static_cast<int64_t>(rows.size()); }
};

// Fills `keys` for row t (of some batch) and group grp; entries of the index inputs are valid (checked).
void row_keys(const Problem& p, const int32_t* ori_idx, const int32_t* cmp_idx, int64_t t, int64_t grp,
              RowKeys& keys);

// Checks every index entry (-1, or a row of the batch's source) and returns the key count of every (row,
// group), [t1 * n2] (0 for padding rows). Throws std::runtime_error naming `op` on the first bad entry.
std::vector<int64_t> validate(const char* op, const Problem& p, const int32_t* ori_idx, const int32_t* cmp_idx);

// Gathers keys[0..n) into tile [npad, d] (zero rows after n) from ori_kv / cmp_kv.
template <typename T, typename Op>
void gather(const Problem& p, const T* ori, const T* cmp, const int32_t* rows, int64_t n, int64_t npad, int64_t grp,
            Op* tile) {
  for (int64_t r = 0; r < n; ++r) {
    const int64_t row = rows[r];
    const T* src = row < p.t2 ? ori + (row * p.n2 + grp) * p.d : cmp + ((row - p.t2) * p.n2 + grp) * p.d;
    to_operand(src, tile + r * p.d, p.d);
  }
  std::fill(tile + n * p.d, tile + npad * p.d, Op{});
}

// The sink logit of head h, -inf (no sink) without sinks.
inline float sink_of(const float* sinks, int64_t h) {
  return sinks != nullptr ? sinks[h] : -std::numeric_limits<float>::infinity();
}

}  // namespace mgo::cpu::smla
