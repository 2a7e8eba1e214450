// The one rule for the optional `actual_seq_lengths_*` inputs of the attention and indexer ops
// (sparse_flash_attention(_grad), lightning_indexer, sparse_lightning_indexer_grad_kl_loss):
//
// - TND: both absent = one sequence of all T1 query tokens and all T2 key tokens; otherwise both
//   present, 1-D int32/int64, one cumulative entry per batch (values are checked by the kernel).
// - BSND: both absent (every batch has the full S1 queries and S2 keys); lengths are a ValueError
//   rather than silently ignored.
#pragma once

#include <string>

#include "common.h"

namespace mgo::infer {

inline void check_seq_lengths(const Checker& c, bool bsnd, const TensorDesc& q, const TensorDesc& kv,
                              const char* kv_arg) {
  const bool q_absent = is_absent(q.shape);
  const bool kv_absent = is_absent(kv.shape);
  const std::string kv_name(kv_arg);
  if (rank_known(q.shape) && rank_known(kv.shape) && q_absent != kv_absent) {
    c.value_error("arguments 'actual_seq_lengths_query' and '" + kv_name +
                  "' must both be given or both be None, got shapes " + shape_str(q.shape) + " and " +
                  shape_str(kv.shape));
  }
  if (bsnd && ((rank_known(q.shape) && !q_absent) || (rank_known(kv.shape) && !kv_absent))) {
    c.value_error("arguments 'actual_seq_lengths_query'/'" + kv_name +
                  "' must be None in BSND layout (every batch has the full S1 queries and S2 keys), got shapes " +
                  shape_str(q.shape) + " and " + shape_str(kv.shape));
  }
  c.integer("actual_seq_lengths_query", q);
  c.integer(kv_arg, kv);
  if (q_absent || kv_absent) return;
  c.rank("actual_seq_lengths_query", q, 1);
  c.rank(kv_arg, kv, 1);
  c.dim(kv_arg, kv, 0, dim_or_unknown(q, 0), "the batch count of 'actual_seq_lengths_query'");
}

}  // namespace mgo::infer
