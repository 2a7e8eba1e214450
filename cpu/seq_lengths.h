// Batch boundaries of one attention/indexer launch, from the layout and the optional
// actual_seq_lengths_* inputs, by the one rule of infer_shape/seq_lengths_rules.h: BSND = B equal
// batches; TND without lengths = one sequence of all T1 queries and T2 keys; TND with lengths =
// the cumulative values (checked here, since inside a graph they are only known at run time).
#pragma once

#include <cstdint>
#include <vector>

#include "aot.h"

namespace mgo::cpu {

// Row starts of every batch with a leading 0 (size = batches + 1), for the queries and the keys.
struct Batches {
  std::vector<int64_t> q, kv;
};

// `batch`: B in BSND (ignored in TND). `lens_q`/`lens_kv`: parameter positions of the lengths.
// Throws std::runtime_error naming `op` and the argument (`kv_arg` for the key side) when the
// values are not non-decreasing cumulative lengths ending at t1 / t2, or the counts differ.
Batches read_batches(const char* op, const aot::KernelArgs& args, bool bsnd, int64_t batch, int64_t t1, int64_t t2,
                     int lens_q, int lens_kv, const char* kv_arg);

}  // namespace mgo::cpu
