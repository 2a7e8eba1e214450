// Shape rules shared by `lightning_indexer`, `lightning_indexer_grad`, `sparse_lightning_indexer_grad_kl_loss`
// and the dense pair `dense_lightning_indexer_softmax_lse` / `dense_lightning_indexer_grad_kl_loss`
// (docs/contract.md section 4): the indexer tensors in either layout, the statistics and the optional inputs. The attributes are parsed and checked by their readers (op_table.h).
//
// Optional inputs (query_rope/key_rope, actual_seq_lengths_*) reach the kernels as the absent
// placeholder of common.h; the lengths follow the one rule of seq_lengths_rules.h.
#pragma once

#include <string>
#include <vector>

#include "common.h"
#include "op_table.h"
#include "seq_lengths_rules.h"

namespace mgo::infer {

using table::Layout;

// Rank of a [tokens..., N, D] tensor in this layout (TND 3, BSND 4).
inline size_t token_rank(Layout l) { return l == Layout::kTND ? 3 : 4; }
// Number of leading token dims (TND: T; BSND: B, S).
inline size_t token_dims(Layout l) { return l == Layout::kTND ? 1 : 2; }

// `t` must share the leading token dims of `ref` (T1, or B and S1); only B when `batch_only`.
inline void same_tokens(const Checker& c, Layout l, const char* arg, const TensorDesc& t, const char* ref_arg,
                        const TensorDesc& ref, bool batch_only = false) {
  const size_t n = batch_only ? (l == Layout::kBSND ? 1 : 0) : token_dims(l);
  for (size_t i = 0; i < n; ++i) {
    c.dim(arg, t, i, dim_or_unknown(ref, i), std::string(i == 0 && l == Layout::kBSND ? "B" : "tokens") +
                                                 " of '" + ref_arg + "'");
  }
}

// query_index [T1, Nidx, Didx] / [B, S1, Nidx, Didx], key_index [T2, 1, Didx] / [B, S2, 1, Didx],
// weights [T1, Nidx] / [B, S1, Nidx]: one float dtype, weights may be float32 instead.
inline void check_indexer_tensors(const Checker& c, Layout l, const TensorDesc& qi, const TensorDesc& ki,
                                  const TensorDesc& w) {
  const size_t r = token_rank(l);
  c.rank("query_index", qi, r, l);
  c.rank("key_index", ki, r, l);
  c.rank("weights", w, r - 1, l);
  c.positive("query_index", qi);
  c.dim("key_index", ki, r - 2, 1, "the key head count N2");
  c.dim("key_index", ki, r - 1, dim_or_unknown(qi, r - 1), "Didx of 'query_index'");
  same_tokens(c, l, "key_index", ki, "query_index", qi, true);
  same_tokens(c, l, "weights", w, "query_index", qi);
  c.dim("weights", w, r - 2, dim_or_unknown(qi, r - 2), "Nidx of 'query_index'");
  c.floating("query_index", qi);
  c.same_dtype("key_index", ki, "query_index", qi);
  c.floating("weights", w);
  if (w.dtype != DType::kFloat32) c.same_dtype("weights", w, "query_index", qi);
}

// sparse_indices int32 [T1, 1, K] / [B, S1, 1, K], non-empty, with the query rows of `ref`.
inline void check_sparse_indices(const Checker& c, Layout l, const TensorDesc& si, const char* ref_arg,
                                 const TensorDesc& ref) {
  const size_t r = token_rank(l);
  c.rank("sparse_indices", si, r, l);
  same_tokens(c, l, "sparse_indices", si, ref_arg, ref);
  c.dim("sparse_indices", si, r - 2, 1, "N2");
  c.positive("sparse_indices", si);
  if (si.dtype != DType::kUnknown && si.dtype != DType::kInt32) {
    c.type_error(std::string("argument 'sparse_indices' must be int32, got ") + dtype_name(si.dtype));
  }
}

// `t` must be float32 (a statistics tensor).
inline void check_float32(const Checker& c, const char* arg, const TensorDesc& t) {
  if (t.dtype != DType::kUnknown && t.dtype != DType::kFloat32) {
    c.type_error(std::string("argument '") + arg + "' must be float32, got " + dtype_name(t.dtype));
  }
}

// softmax_max/softmax_sum of the main attention over the query rows of `q` [tokens..., N1, D]: float32
// [N2, T1, G] / [B, N2, S1, G] with G = N1 / N2 (the layout sparse_flash_attention returns).
inline void check_attention_stats(const Checker& c, Layout l, const TensorDesc& mx, const TensorDesc& sm,
                                  const TensorDesc& q, int64_t n2) {
  const size_t r = token_rank(l);
  const int64_t n1 = dim_or_unknown(q, r - 2);
  c.rank("softmax_max", mx, r, l);
  if (l == Layout::kTND) {
    c.dim("softmax_max", mx, 0, n2, "N2");
    c.dim("softmax_max", mx, 1, dim_or_unknown(q, 0), "T1 of 'query'");
  } else {
    c.dim("softmax_max", mx, 0, dim_or_unknown(q, 0), "B of 'query'");
    c.dim("softmax_max", mx, 1, n2, "N2");
    c.dim("softmax_max", mx, 2, dim_or_unknown(q, 1), "S1 of 'query'");
  }
  if (n2 == 1) {
    c.dim("softmax_max", mx, r - 1, n1, "N1 of 'query'");
  } else if (known(n1) && known(n2) && n2 > 0) {
    c.dim("softmax_max", mx, r - 1, n1 / n2, "G = N1 / N2 of 'query' and 'key'");
  }
  c.same_shape("softmax_sum", sm, "softmax_max", mx);
  check_float32(c, "softmax_max", mx);
  check_float32(c, "softmax_sum", sm);
}

// Shape [1, T1] / [B, 1, S1] of the indexer's per-row statistics for the query rows of `qi`.
inline Shape index_stats_shape(Layout l, const TensorDesc& qi) {
  if (l == Layout::kTND) return {1, dim_or_unknown(qi, 0)};
  return {dim_or_unknown(qi, 0), 1, dim_or_unknown(qi, 1)};
}

// Output shape [tokens..., 1, K] of the sparse indices for query rows shaped like `qi`.
inline Shape sparse_shape(Layout l, const TensorDesc& qi, int64_t k) {
  Shape s;
  for (size_t i = 0; i < token_dims(l); ++i) s.push_back(dim_or_unknown(qi, i));
  s.push_back(1);
  s.push_back(k);
  return s;
}

}  // namespace mgo::infer
