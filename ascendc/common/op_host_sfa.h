// What the op_host descriptions of SparseFlashAttention and SparseFlashAttentionGrad share: their
// common attributes, and the pure SFA tiling (sfa_tiling_common.h) called from their input shapes.
// CANN-only like op_host_adapter.h; tests/test_ascendc_op_host.py runs it against tests/cann_stub.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "../../infer_shape/sparse_flash_attention_common.h"
#include "op_host_adapter.h"
#include "sfa_tiling_common.h"

namespace mgo::op_host {

// The attributes both ops share, as the shape rules take them, plus the grad's `deterministic`.
struct SfaHostAttrs {
  mgo::infer::SfaAttrs rules;
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

// Shapes of the inputs the tiling reads. Absent optional inputs are the zero-size placeholder.
struct SfaTilingInputs {
  const mgo::infer::Shape& query;           // TND [T1, N1, D] / BSND [B, S1, N1, D]
  const mgo::infer::Shape& key;             // [T2, N2, D] / [B, S2, N2, D]
  const mgo::infer::Shape& value;           // like key, or absent (key is value)
  const mgo::infer::Shape& sparse_indices;  // [T1, N2, K] / [B, S1, N2, K]
  const mgo::infer::Shape& query_rope;      // [..., Dr] or absent
  const mgo::infer::Shape& lens_q;          // TND: [B] cumulative, or absent (one sequence)
};

inline uint64_t SfaDim(const mgo::infer::Shape& s, size_t i) {
  if (i >= s.size() || s[i] < 0) throw std::invalid_argument("tiling needs known input shapes");
  return static_cast<uint64_t>(s[i]);
}

// The tiling's view of the shapes. TND without lengths is one sequence of T1 queries and T2 keys,
// which has the memory layout and the causal alignment of BSND with B = 1, so it is tiled as
// that and the kernel needs no third case.
inline mgo::tiling::SfaShape SfaTilingShape(const SfaTilingInputs& in, const std::string& layout) {
  if (mgo::infer::is_absent(in.value)) {
    // The kernels gather V from `value`; key-is-value needs a kernel path that reads key instead.
    throw std::invalid_argument("the Ascend kernel needs 'value' (value=None, key is value, runs on CPU only)");
  }
  const bool bsnd = layout == "BSND";
  const size_t r = bsnd ? 4 : 3;  // the head-dim axis is r - 1, the head axis r - 2
  if (in.query.size() != r || in.key.size() != r || in.sparse_indices.size() != r) {
    throw std::invalid_argument("query/key/sparse_indices must have rank " + std::to_string(r) + " in " + layout);
  }
  mgo::tiling::SfaShape s{};
  s.n1 = SfaDim(in.query, r - 2);
  s.n2 = SfaDim(in.key, r - 2);
  s.d = SfaDim(in.query, r - 1);
  s.k = SfaDim(in.sparse_indices, r - 1);
  s.dr = mgo::infer::is_absent(in.query_rope) ? 0 : SfaDim(in.query_rope, r - 1);
  if (bsnd || mgo::infer::is_absent(in.lens_q)) {
    s.layout = mgo::tiling::SfaLayout::kBSND;
    s.batch = bsnd ? SfaDim(in.query, 0) : 1;
    s.s1 = SfaDim(in.query, bsnd ? 1 : 0);
    s.s2 = SfaDim(in.key, bsnd ? 1 : 0);
    s.t1 = s.batch * s.s1;
    s.t2 = s.batch * s.s2;
  } else {
    s.layout = mgo::tiling::SfaLayout::kTND;
    s.batch = SfaDim(in.lens_q, 0);
    s.t1 = SfaDim(in.query, 0);
    s.t2 = SfaDim(in.key, 0);
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
