// Batch boundaries of one attention/indexer launch, from the layout and the optional
// actual_seq_lengths_* inputs, by the one rule of infer_shape/seq_lengths_rules.h (docs/contract.md
// section 0.3): TND without lengths = one sequence of all T1 queries and T2 keys; TND with lengths =
// the cumulative values; BSND = B batches of S1 query and S2 key rows, of which the first
// per-batch length (all without lengths) are real and the rest padding. Values are checked here,
// since inside a graph they are only known at run time.
#pragma once

#include <cstdint>
#include <vector>

#include "aot.h"

namespace mgo::cpu {

// Per batch b: its query rows [q0[b], q0[b] + q_len[b]) and key rows [kv0[b], kv0[b] + kv_len[b])
// on the flattened token axis (BSND: row = b * S + s). Rows of no batch (BSND padding) are outside
// every range.
struct Batches {
  std::vector<int64_t> q0, q_len, kv0, kv_len;
  int64_t count() const { return static_cast<int64_t>(q0.size()); }
  // The batch of every query row, -1 for a padding row, [t1].
  std::vector<int32_t> row_batches(int64_t t1) const;
};

// `batch`: B in BSND (ignored in TND). `lens_q`/`lens_kv`: parameter positions of the lengths.
// Throws std::runtime_error naming `op` and the argument (`kv_arg` for the key side) when TND
// values are not non-decreasing cumulative lengths ending at t1 / t2, BSND values are not in
// [0, S], or the counts differ.
Batches read_batches(const char* op, const aot::KernelArgs& args, bool bsnd, int64_t batch, int64_t t1, int64_t t2,
                     int lens_q, int lens_kv, const char* kv_arg);

}  // namespace mgo::cpu
