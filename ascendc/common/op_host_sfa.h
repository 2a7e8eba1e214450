// What the op_host descriptions of SparseFlashAttention and SparseFlashAttentionGrad share: their
// common attributes, and the pure SFA tiling (sfa_tiling_common.h) called from their input shapes.
// CANN-only like op_host_adapter.h; tests/test_ascendc_op_host.py runs it against tests/cann_stub.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "../../infer_shape/sparse_flash_attention_rules.h"
#include "op_host_adapter.h"
#include "sfa_tiling_common.h"

namespace mgo::op_host {

// The attributes both ops share, as the shape rules take them, plus the grad's `deterministic`.
struct SfaHostAttrs {
  mgo::table::SparseFlashAttentionGrad::Attrs rules;  // the forward's attributes are its first four
  bool deterministic = false;
};

// Attributes 0-3 of both OpDefs: scale_value, sparse_block_size, layout, sparse_mode.
inline SfaHostAttrs ReadSfaAttrs(const gert::RuntimeAttrs* a) {
  SfaHostAttrs r;
  r.rules.scale_value = FloatAttr(a, 0, "scale_value");
  r.rules.sparse_block_size = IntAttr(a, 1, "sparse_block_size");
  r.rules.layout = StrAttr(a, 2, "layout");
  r.rules.sparse_mode = IntAttr(a, 3, "sparse_mode");
  return r;
}

// The inputs the tiling reads. Absent optional inputs are the zero-size placeholder.
struct SfaTilingInputs {
  const mgo::infer::TensorDesc& query;           // TND [T1, N1, D] / BSND [B, S1, N1, D]
  const mgo::infer::TensorDesc& key;             // [T2, N2, D] / [B, S2, N2, D]
  const mgo::infer::TensorDesc& value;           // like key, or absent (key is value)
  const mgo::infer::TensorDesc& sparse_indices;  // [T1, N2, K] / [B, S1, N2, K]
  const mgo::infer::TensorDesc& query_rope;      // [..., Dr] or absent
  const mgo::infer::TensorDesc& lens_q;          // TND: [B] int32/int64 cumulative, or absent
};

// The pure tiling's view of the shapes. TND without lengths (one sequence) is batch 0: the pure
// tiling lays it out as BSND with B = 1.
inline mgo::tiling::SfaShape SfaTilingShape(const SfaTilingInputs& in, const std::string& layout) {
  const bool bsnd = layout == "BSND";
  const size_t r = bsnd ? 4 : 3;  // the head-dim axis is r - 1, the head axis r - 2
  if (in.query.shape.size() != r || in.key.shape.size() != r || in.sparse_indices.shape.size() != r) {
    throw std::invalid_argument("query/key/sparse_indices must have rank " + std::to_string(r) + " in " + layout);
  }
  mgo::tiling::SfaShape s{};
  s.n1 = Dim(in.query, r - 2);
  s.n2 = Dim(in.key, r - 2);
  s.d = Dim(in.query, r - 1);
  s.k = Dim(in.sparse_indices, r - 1);
  s.dr = mgo::infer::is_absent(in.query_rope.shape) ? 0 : Dim(in.query_rope, r - 1);
  s.valueAbsent = mgo::infer::is_absent(in.value.shape);
  s.seqLensInt64 = in.lens_q.dtype == mgo::infer::DType::kInt64;
  if (bsnd) {
    s.layout = mgo::tiling::SfaLayout::kBSND;
    s.batch = Dim(in.query, 0);
    s.s1 = Dim(in.query, 1);
    s.s2 = Dim(in.key, 1);
    s.t1 = s.batch * s.s1;
    s.t2 = s.batch * s.s2;
  } else {
    s.layout = mgo::tiling::SfaLayout::kTND;
    s.batch = mgo::infer::is_absent(in.lens_q.shape) ? 0 : Dim(in.lens_q, 0);
    s.t1 = Dim(in.query, 0);
    s.t2 = Dim(in.key, 0);
  }
  return s;
}

inline mgo::tiling::SfaAttrs SfaTilingAttrs(const SfaHostAttrs& a) {
  return {static_cast<float>(a.rules.scale_value), static_cast<uint32_t>(a.rules.sparse_block_size),
          static_cast<uint32_t>(a.rules.sparse_mode), a.deterministic};
}

// Runs `compute` (ComputeSparseFlashAttention(Grad)Tiling) on the inputs. The lengths' values live
// on the device (ValueDepend inputs would become host int arrays in the aclnn signature), so the
// tiling balances rows by count. A mixed launch's block dim counts AI cores (1 AIC + 2 AIV each).
template <typename Compute>
auto TileSfa(Compute compute, const SfaTilingInputs& in, mgo::tiling::DType dtype, const SfaHostAttrs& a,
             const Platform& p, bool all_cores_at_once) {
  const mgo::tiling::CubePlatform cube{p.aicNum, p.ubBytes, p.l1Bytes, p.l0aBytes, p.l0bBytes, p.l0cBytes};
  const auto t = compute(SfaTilingShape(in, a.rules.layout), SfaTilingAttrs(a), dtype,
                         mgo::tiling::SfaSeqLengths{nullptr, nullptr, 0}, cube);
  return Plan(t, t.result.data.usedAicNum, t.result.workspaceBytes, all_cores_at_once);
}

}  // namespace mgo::op_host
