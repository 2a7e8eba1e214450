// The one rule for the optional `actual_seq_lengths_*` inputs of the attention and indexer ops
// (sparse_flash_attention(_grad), lightning_indexer(_grad), sparse_lightning_indexer_grad_kl_loss),
// docs/contract.md section 0.3. Each present one is a 1-D int32/int64 tensor with one entry per batch.
//
// - TND: **cumulative** lengths (no leading 0), both or neither. Both absent = one sequence of all
//   T1 query tokens and all T2 key tokens. Their values (non-decreasing, the last = T1 / T2) are
//   checked by the kernels.
// - BSND: **per-batch** valid lengths of the padded rows (CANN's meaning): entry b says how many of
//   the S1 query rows (S2 key rows) of batch b are real, 0 <= len <= S. Each may be given alone: an
//   absent one means the full S. B entries each; their values are checked by the kernels.
#pragma once

#include <string>

#include "common.h"

namespace mgo::infer {

// `batch`: B of query in BSND (unknown or ignored in TND).
inline void check_seq_lengths(const Checker& c, bool bsnd, const TensorDesc& q, const TensorDesc& kv,
                              const char* kv_arg, int64_t batch) {
  const bool q_absent = is_absent(q.shape);
  const bool kv_absent = is_absent(kv.shape);
  const std::string kv_name(kv_arg);
  if (!bsnd && rank_known(q.shape) && rank_known(kv.shape) && q_absent != kv_absent) {
    c.value_error("arguments 'actual_seq_lengths_query' and '" + kv_name +
                  "' must both be given or both be None in TND layout (cumulative lengths), got shapes " +
                  shape_str(q.shape) + " and " + shape_str(kv.shape));
  }
  c.integer("actual_seq_lengths_query", q);
  c.integer(kv_arg, kv);
  const char* what = "the batch size B of 'query' (BSND lengths are per batch)";
  if (!q_absent) {
    c.rank("actual_seq_lengths_query", q, 1);
    if (bsnd) c.dim("actual_seq_lengths_query", q, 0, batch, what);
  }
  if (!kv_absent) {
    c.rank(kv_arg, kv, 1);
    if (bsnd) c.dim(kv_arg, kv, 0, batch, what);
  }
  if (!bsnd && !q_absent && !kv_absent) {
    c.dim(kv_arg, kv, 0, dim_or_unknown(q, 0), "the batch count of 'actual_seq_lengths_query'");
  }
}

}  // namespace mgo::infer
