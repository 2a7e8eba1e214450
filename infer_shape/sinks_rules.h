// The optional learnable sinks of the attention ops and the KL loss (docs/contract.md section 0.7):
// one float32 sink logit per query head, sinks [N1] with N1 = dim -2 of query, or absent.
#pragma once

#include <string>

#include "common.h"

namespace mgo::infer {

// Checks `sinks` against `query` (rank r: TND 3, BSND 4). Returns true when sinks is present (or
// its shape is not known yet).
// (An absent one may have any dtype: CANN omits it, the Python placeholder is float32.)
inline bool check_sinks(const Checker& c, const TensorDesc& sinks, const TensorDesc& query, size_t r) {
  if (is_absent(sinks.shape)) return false;
  if (sinks.dtype != DType::kUnknown && sinks.dtype != DType::kFloat32) {
    c.type_error(std::string("argument 'sinks' must be float32, got ") + dtype_name(sinks.dtype));
  }
  const int64_t n1 = dim_or_unknown(query, r - 2);
  const bool rank_ok = !rank_known(sinks.shape) || sinks.shape.size() == 1;
  if (!rank_ok || (known(n1) && known(sinks.shape[0]) && sinks.shape[0] != n1)) {
    c.value_error("argument 'sinks' must have shape [N1] = [" + (known(n1) ? std::to_string(n1) : "?") +
                  "], N1 the heads of 'query' " + shape_str(query.shape) + ", got shape " + shape_str(sinks.shape));
  }
  return true;
}

}  // namespace mgo::infer
