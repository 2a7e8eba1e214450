// The inputs of the pure SFA tiling (sfa_tiling_common.h) from the input shapes and attributes
// of SparseFlashAttention / SparseFlashAttentionGrad, for their op_host adapters.
//
// Plain C++17 over infer_shape/ and the tiling headers (no CANN): the op_host sources call it, and
// tests/test_ascendc_op_host.py runs it through the adapter against tests/cann_stub.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "../../infer_shape/sparse_flash_attention_common.h"
#include "sfa_tiling_common.h"

namespace mgo::op_host {

// The attributes both ops share, as the shape rules take them, plus the grad's `deterministic`.
struct SfaHostAttrs {
  mgo::infer::SfaAttrs rules;
  bool deterministic = false;
};

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

// The lengths' values live on the device (they are not ValueDepend inputs, which would turn them
// into host int arrays in the aclnn signature): the tiling balances rows by count then.
inline constexpr mgo::tiling::SfaSeqLengths kSfaLengthsOnDevice{nullptr, nullptr, 0};

}  // namespace mgo::op_host
