// The optional `cmp_residual_k` input of the ops over compressed keys (docs/contract.md section 9.1):
// per batch, the original tokens of the last, incomplete compression block (S_orig = S2 * cmp_ratio +
// cmp_residual_k[b]). A 1-D int32/int64 tensor with one entry per batch: B in BSND; in TND the
// number of sequences of the lengths, or 1 without them. Its values (0 <= r < cmp_ratio) are checked
// by the kernels.
#pragma once

#include "common.h"
#include "seq_lengths_rules.h"

namespace mgo::infer {

// `query`: the query-side tensor (query or query_index) whose dim 0 is B in BSND; `lens_q`:
// actual_seq_lengths_query.
inline void check_cmp_residual(const Checker& c, bool bsnd, const TensorDesc& res, const TensorDesc& query,
                               const TensorDesc& lens_q) {
  if (is_absent(res.shape)) return;
  c.integer("cmp_residual_k", res);
  c.rank("cmp_residual_k", res, 1);
  if (bsnd) {
    c.dim("cmp_residual_k", res, 0, dim_or_unknown(query, 0), "the batch size B (one per batch)");
  } else if (!rank_known(lens_q.shape)) {
    return;
  } else if (is_absent(lens_q.shape)) {
    c.dim("cmp_residual_k", res, 0, 1, "1 (TND without lengths is one sequence)");
  } else {
    c.dim("cmp_residual_k", res, 0, dim_or_unknown(lens_q, 0), "the batch count of 'actual_seq_lengths_query'");
  }
}

}  // namespace mgo::infer
