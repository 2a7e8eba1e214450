// Query-row grouping of the sparse flash attention CPU kernels.
//
// A group is R consecutive query rows of one batch and key group that are processed together over
// the union of their visible selected keys: the GEMMs get R * G query rows instead of G (the
// backward's dK/dV products get a K-dim of R * G), one gathered key tile serves R rows, and the
// backward's dK/dV scatter-add runs once per union key instead of once per row and key. A pair
// (row, union key) the row did not select weighs 0 (P = dS = 0 there); a key the row selected
// twice weighs 2, as it counts twice (docs/contract.md section 3).
//
// R is chosen from the indices only (never from the thread count), so results stay bitwise
// reproducible: R grows while R * |union| <= 1.25 * the rows' own visible pairs (dense causal
// selections group, random sparse ones stay at R = 1), then rounds down to a power of two so the
// GEMM shapes repeat. Weight 0 must give an exact 0 contribution, which 0 * x only does for finite
// x: rows that select a non-finite key row stay alone, and the kernels split a group whose gathered
// query-side tile is not finite (see all_finite).
#pragma once

#include <cstdint>
#include <vector>

#include "sparse_flash_attention_common.h"

namespace mgo::cpu::sfa {

// Query rows [t0, t0 + rows) of key group grp.
struct RowGroup {
  int64_t t0 = 0, rows = 1, grp = 0;
};

// Most query rows of one group and most GEMM rows (rows * G) of a group.
constexpr int64_t kMaxGroupRows = 16;
constexpr int64_t kMaxGroupM = 512;

// Largest group size for G heads per key group: a power of two with rows * G <= kMaxGroupM.
int64_t max_group_rows(int64_t g);

// Flags of the key rows [t2 * n2] whose key, key_rope and value elements are all finite.
template <typename T>
std::vector<uint8_t> finite_key_rows(const Problem& p, const Inputs<T>& in);

// Groups covering query rows [r0, r1) of every key group, in (group, row) order. counts[t * n2 + grp]
// is the visible-key count of (t, grp) (validate_indices); key_ok from finite_key_rows.
std::vector<RowGroup> group_rows(const Problem& p, const int32_t* indices, const std::vector<int64_t>& counts,
                                 const std::vector<uint8_t>& key_ok, int64_t r0, int64_t r1, int64_t max_rows);

// The union of the visible keys of a group, ascending, and every row's weight on it.
struct KeyUnion {
  std::vector<int32_t> keys;   // global key rows
  std::vector<float> weight;   // [rows, keys.size()]: times row r selected keys[u]
  bool weighted = false;       // some weight is not 1 (otherwise weight is unused)
};

// Fills u for group grp_rows (scratch: a reused buffer).
void key_union(const Problem& p, const int32_t* indices, const RowGroup& grp_rows, std::vector<int32_t>& scratch,
               KeyUnion& u);

// True when every element of x[0..n) is finite (neither Inf nor NaN).
bool all_finite(const float* x, int64_t n);
bool all_finite(const uint16_t* bf16, int64_t n);

}  // namespace mgo::cpu::sfa
