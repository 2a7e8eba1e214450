// Shape rules shared by `sparse_flash_mla` and `sparse_flash_mla_grad` (docs/contract.md section 8): one
// checker of the inputs both ops take, in either layout.
//
// TND: query [T1, N1, D], ori_kv [T2, N2, D], cmp_kv [T3, N2, D], ori/cmp_sparse_indices [T1, N2, K] int32;
// BSND: [B, S1, N1, D], [B, S2, N2, D], [B, S3, N2, D], [B, S1, N2, K]. Lengths (CANN's): cu_seqlens_* [B + 1]
// int32, cumulative with the leading 0 (TND only; q and ori_kv both or neither, cmp_kv's with them when cmp_kv
// is given); seqused_* and cmp_residual_kv [B] int32 (B = batches: BSND's B, TND's len(cu) - 1, or 1 without
// cu_seqlens). softmax_lse float32 [N2, T1, G] (TND) or [B, N2, S1, G] (BSND), G = N1 / N2; sinks float32 [N1].
#pragma once

#include <string>
#include <vector>

#include "common.h"
#include "op_table.h"
#include "sinks_rules.h"

namespace mgo::infer {

// The named inputs common to both ops (all but query and ori_kv may be the absent placeholder).
struct SmlaInputs {
  const TensorDesc &query, &ori_kv, &cmp_kv, &ori_idx, &cmp_idx;
  const TensorDesc &cu_q, &cu_ori, &cu_cmp, &used_q, &used_ori, &used_cmp, &residual, &sinks;
};

template <class Op>
SmlaInputs smla_inputs(const std::vector<TensorDesc>& in) {
  using In = typename Op::In;
  return {in[In::kQuery],         in[In::kOriKv],        in[In::kCmpKv],        in[In::kOriSparseIndices],
          in[In::kCmpSparseIndices], in[In::kCuSeqlensQ], in[In::kCuSeqlensOriKv], in[In::kCuSeqlensCmpKv],
          in[In::kSequsedQ],      in[In::kSequsedOriKv], in[In::kSequsedCmpKv], in[In::kCmpResidualKv],
          in[In::kSinks]};
}

// A present 1-D int32 lengths input with `want` entries (when known).
inline void check_smla_lengths(const Checker& c, const char* arg, const TensorDesc& t, int64_t want,
                               const std::string& what) {
  if (is_absent(t.shape)) return;
  if (t.dtype != DType::kUnknown && t.dtype != DType::kInt32) {
    c.type_error(std::string("argument '") + arg + "' must be int32, got " + dtype_name(t.dtype));
  }
  c.rank(arg, t, 1);
  c.dim(arg, t, 0, want, what);
}

// Checks the inputs common to both ops in `layout`; returns the softmax_lse shape.
inline Shape check_smla_inputs(const Checker& c, const SmlaInputs& in, table::Layout layout) {
  const bool bsnd = layout == table::Layout::kBSND;
  const size_t r = bsnd ? 4 : 3;
  const size_t n_ax = r - 2;  // head axis
  const TensorDesc& q = in.query;
  // present and known: an unknown shape (a dtype-only infer) neither breaks nor passes a rule
  const auto given = [](const TensorDesc& t) { return rank_known(t.shape) && !is_absent(t.shape); };
  const bool has_cmp = !is_absent(in.cmp_kv.shape);
  c.rank("query", q, r, layout);
  c.rank("ori_kv", in.ori_kv, r, layout);
  c.floating("query", q);
  c.same_dtype("ori_kv", in.ori_kv, "query", q);
  c.positive("query", q);
  const int64_t n1 = dim_or_unknown(q, n_ax);
  const int64_t n2 = dim_or_unknown(in.ori_kv, n_ax);
  c.dim("ori_kv", in.ori_kv, r - 1, dim_or_unknown(q, r - 1), "the head size D of 'query'");
  if (bsnd) c.dim("ori_kv", in.ori_kv, 0, dim_or_unknown(q, 0), "the batch size B of 'query'");
  if (known(n2) && n2 < 1) c.value_error("argument 'ori_kv' must have N2 >= 1, got shape " + shape_str(in.ori_kv.shape));
  if (known(n1) && known(n2) && n2 > 0 && n1 % n2 != 0) {
    c.value_error("N1 = " + std::to_string(n1) + " of 'query' must be a multiple of N2 = " + std::to_string(n2) +
                  " of 'ori_kv', got shapes " + shape_str(q.shape) + " and " + shape_str(in.ori_kv.shape));
  }
  if (has_cmp) {
    c.rank("cmp_kv", in.cmp_kv, r, layout);
    c.same_dtype("cmp_kv", in.cmp_kv, "query", q);
    c.dim("cmp_kv", in.cmp_kv, r - 1, dim_or_unknown(q, r - 1), "the head size D of 'query'");
    c.dim("cmp_kv", in.cmp_kv, n_ax, n2, "N2 of 'ori_kv'");
    if (bsnd) c.dim("cmp_kv", in.cmp_kv, 0, dim_or_unknown(q, 0), "the batch size B of 'query'");
  } else if (given(in.cmp_idx)) {
    c.value_error("argument 'cmp_sparse_indices' needs 'cmp_kv' (the entries it selects), got cmp_kv None");
  }
  for (const auto& [name, idx] : {std::pair<const char*, const TensorDesc*>{"ori_sparse_indices", &in.ori_idx},
                                  {"cmp_sparse_indices", &in.cmp_idx}}) {
    if (is_absent(idx->shape)) continue;
    c.rank(name, *idx, r, layout);
    if (idx->dtype != DType::kUnknown && idx->dtype != DType::kInt32) {
      c.type_error(std::string("argument '") + name + "' must be int32, got " + dtype_name(idx->dtype));
    }
    for (size_t i = 0; i < n_ax; ++i) c.dim(name, *idx, i, dim_or_unknown(q, i), "the matching dim of 'query'");
    c.dim(name, *idx, n_ax, n2, "N2 of 'ori_kv'");
    c.positive(name, *idx);
  }
  // Lengths: cumulative (B + 1) in TND only, q and ori both or neither, cmp's with them when cmp_kv is given.
  const bool cu_q = given(in.cu_q), cu_ori = given(in.cu_ori), cu_cmp = given(in.cu_cmp);
  int64_t batches = bsnd ? dim_or_unknown(q, 0) : 1;
  if (bsnd && (cu_q || cu_ori || cu_cmp)) {
    c.value_error("the cu_seqlens_* inputs are TND lengths (cumulative); BSND takes seqused_* (per batch), got "
                  "cu_seqlens shapes " + shape_str(in.cu_q.shape) + ", " + shape_str(in.cu_ori.shape) + ", " +
                  shape_str(in.cu_cmp.shape));
  }
  const bool known_cu = rank_known(in.cu_q.shape) && rank_known(in.cu_ori.shape) && rank_known(in.cu_cmp.shape) &&
                        rank_known(in.cmp_kv.shape);
  if (!bsnd && known_cu &&
      (cu_q != cu_ori || (cu_q && has_cmp && !cu_cmp) || (!cu_q && cu_cmp) || (!has_cmp && cu_cmp))) {
    c.value_error("arguments 'cu_seqlens_q' and 'cu_seqlens_ori_kv' must both be given or both be None, and "
                  "'cu_seqlens_cmp_kv' with them exactly when 'cmp_kv' is given, got shapes " +
                  shape_str(in.cu_q.shape) + ", " + shape_str(in.cu_ori.shape) + ", " + shape_str(in.cu_cmp.shape));
  }
  if (!bsnd && cu_q) {
    check_smla_lengths(c, "cu_seqlens_q", in.cu_q, kUnknownDim, "");
    const int64_t n = dim_or_unknown(in.cu_q, 0);
    if (known(n) && n < 2) c.value_error("argument 'cu_seqlens_q' must have B + 1 >= 2 entries, got shape " +
                                         shape_str(in.cu_q.shape));
    batches = known(n) ? n - 1 : kUnknownDim;
    check_smla_lengths(c, "cu_seqlens_ori_kv", in.cu_ori, n, "the B + 1 entries of 'cu_seqlens_q'");
    check_smla_lengths(c, "cu_seqlens_cmp_kv", in.cu_cmp, n, "the B + 1 entries of 'cu_seqlens_q'");
  }
  const std::string per_batch = "the batch count B (BSND: query dim 0; TND: len(cu_seqlens_q) - 1, or 1)";
  check_smla_lengths(c, "seqused_q", in.used_q, batches, per_batch);
  check_smla_lengths(c, "seqused_ori_kv", in.used_ori, batches, per_batch);
  check_smla_lengths(c, "seqused_cmp_kv", in.used_cmp, batches, per_batch);
  check_smla_lengths(c, "cmp_residual_kv", in.residual, batches, per_batch);
  if (!has_cmp && given(in.used_cmp)) {
    c.value_error("argument 'seqused_cmp_kv' needs 'cmp_kv', got cmp_kv None");
  }
  check_sinks(c, in.sinks, q, r);
  const int64_t g = known(n1) && known(n2) && n2 > 0 ? n1 / n2 : kUnknownDim;
  if (bsnd) return {dim_or_unknown(q, 0), n2, dim_or_unknown(q, 1), g};
  return {n2, dim_or_unknown(q, 0), g};
}

// An index input's softmax L1 norm: float32 shaped like it, absent with it.
inline Shape smla_l1_norm_shape(const TensorDesc& idx) { return is_absent(idx.shape) ? Shape{0} : idx.shape; }

}  // namespace mgo::infer
