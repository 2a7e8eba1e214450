// The optional rope pair of the attention and indexer ops: query_rope [tokens..., N1, Dr] and
// key_rope [tokens..., N2, Dr] (rank r: TND 3, BSND 4), both absent or both present, matching
// query/key in every dim but the last, one Dr, the dtype of query.
#pragma once

#include "common.h"

namespace mgo::infer {

// Returns true when the pair is present (or its shapes are not known yet).
inline bool check_rope_pair(const Checker& c, table::Layout layout, const TensorDesc& q, const TensorDesc& k,
                            const TensorDesc& qr, const TensorDesc& kr) {
  if (rank_known(qr.shape) && rank_known(kr.shape) && is_absent(qr.shape) != is_absent(kr.shape)) {
    c.value_error("arguments 'query_rope' and 'key_rope' must be given together (or both be None), got shapes " +
                  shape_str(qr.shape) + " and " + shape_str(kr.shape));
  }
  c.same_dtype("query_rope", qr, "query", q);
  c.same_dtype("key_rope", kr, "query", q);
  if (is_absent(qr.shape)) return false;
  const size_t r = layout == table::Layout::kTND ? 3 : 4;
  c.rank("query_rope", qr, r, layout);
  c.rank("key_rope", kr, r, layout);
  for (size_t i = 0; i + 1 < r; ++i) {
    c.dim("query_rope", qr, i, dim_or_unknown(q, i), "the matching dim of 'query'");
    c.dim("key_rope", kr, i, dim_or_unknown(k, i), "the matching dim of 'key'");
  }
  c.dim("key_rope", kr, r - 1, dim_or_unknown(qr, r - 1), "the rope size Dr of 'query_rope'");
  c.positive("query_rope", qr);
  return true;
}

}  // namespace mgo::infer
