// Shape rules shared by `sparse_flash_attention` and `sparse_flash_attention_grad` (docs/contract.md section 3).
//
// TND: query [T1, N1, D], key/value [T2, N2, D], sparse_indices [T1, N2, K] int32, query_rope
// [T1, N1, Dr], key_rope [T2, N2, Dr], actual_seq_lengths_* [B] int32/int64 (cumulative).
// BSND: [B, S1, N1, D], [B, S2, N2, D], [B, S1, N2, K], ..., lengths [B] (per batch). Statistics: float32 [N2, T1, G] (TND)
// or [B, N2, S1, G] (BSND), G = N1 / N2. sinks float32 [N1] (sinks_rules.h).
//
// Optional inputs are the absent placeholder of common.h: value (absent = key is value, DeepSeek's
// shared latent KV), the rope pair (rope_pair.h), the lengths (the rule of seq_lengths_rules.h) and sinks.
#pragma once

#include <string>
#include <vector>

#include "common.h"
#include "op_table.h"
#include "rope_pair.h"
#include "seq_lengths_rules.h"
#include "sinks_rules.h"

namespace mgo::infer {

// The named inputs common to both ops (value, the ropes and the lengths may be absent).
struct SfaInputs {
  const TensorDesc &query, &key, &value, &sparse_indices, &query_rope, &key_rope, &lens_q, &lens_kv, &sinks;
};

// The common inputs of `Op` (table::SparseFlashAttention or table::SparseFlashAttentionGrad: the
// two name them alike, in different slots).
template <class Op>
SfaInputs sfa_inputs(const std::vector<TensorDesc>& in) {
  using In = typename Op::In;
  return {in[In::kQuery],     in[In::kKey],     in[In::kValue],                 in[In::kSparseIndices],
          in[In::kQueryRope], in[In::kKeyRope], in[In::kActualSeqLengthsQuery], in[In::kActualSeqLengthsKv],
          in[In::kSinks]};
}

// Checks the inputs common to both ops in `layout`; returns the statistics shape. (The attributes
// are parsed and checked by their readers, op_table.h.)
inline Shape check_sfa_inputs(const Checker& c, const SfaInputs& in, table::Layout layout) {
  const bool bsnd = layout == table::Layout::kBSND;
  const size_t r = bsnd ? 4 : 3;
  const TensorDesc& q = in.query;
  const TensorDesc& k = in.key;
  c.rank("query", q, r, layout);
  c.rank("key", k, r, layout);
  c.rank("sparse_indices", in.sparse_indices, r, layout);
  if (!is_absent(in.value.shape)) c.same_shape("value", in.value, "key", k);
  c.floating("query", q);
  c.same_dtype("key", k, "query", q);
  c.same_dtype("value", in.value, "query", q);
  if (in.sparse_indices.dtype != DType::kUnknown && in.sparse_indices.dtype != DType::kInt32) {
    c.type_error(std::string("argument 'sparse_indices' must be int32, got ") + dtype_name(in.sparse_indices.dtype));
  }
  const size_t n_ax = r - 2;  // head axis
  const int64_t n1 = dim_or_unknown(q, n_ax);
  const int64_t n2 = dim_or_unknown(k, n_ax);
  c.dim("key", k, r - 1, dim_or_unknown(q, r - 1), "the head size D of 'query'");
  if (bsnd) c.dim("key", k, 0, dim_or_unknown(q, 0), "the batch size B of 'query'");
  if (known(n2) && n2 < 1) c.value_error("argument 'key' must have N2 >= 1, got shape " + shape_str(k.shape));
  if (known(n1) && known(n2) && n2 > 0 && n1 % n2 != 0) {
    c.value_error("N1 = " + std::to_string(n1) + " of 'query' must be a multiple of N2 = " + std::to_string(n2) +
                  " of 'key', got shapes " + shape_str(q.shape) + " and " + shape_str(k.shape));
  }
  for (size_t i = 0; i < n_ax; ++i) {
    c.dim("sparse_indices", in.sparse_indices, i, dim_or_unknown(q, i), "the matching dim of 'query'");
  }
  c.dim("sparse_indices", in.sparse_indices, n_ax, n2, "N2 of 'key'");
  c.positive("sparse_indices", in.sparse_indices);
  c.positive("query", q);
  check_rope_pair(c, layout, q, k, in.query_rope, in.key_rope);
  check_seq_lengths(c, bsnd, in.lens_q, in.lens_kv, "actual_seq_lengths_kv", dim_or_unknown(q, 0));
  check_sinks(c, in.sinks, q, r);
  const int64_t g = known(n1) && known(n2) && n2 > 0 ? n1 / n2 : kUnknownDim;
  if (bsnd) return {dim_or_unknown(q, 0), n2, dim_or_unknown(q, 1), g};
  return {n2, dim_or_unknown(q, 0), g};
}

}  // namespace mgo::infer
