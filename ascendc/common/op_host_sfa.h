// What the op_host descriptions of SparseFlashAttention and SparseFlashAttentionGrad share: the
// pure SFA tiling (sfa_tiling_common.h) called from their inputs (by the table's slots) and their
// table attributes.
// CANN-only like op_host_adapter.h; tests/ascend/test_ascendc_op_host.py runs it against tests/ascend/cann_stub.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "op_host_adapter.h"
#include "op_host_tokens.h"
#include "sfa_tiling_common.h"

namespace mgo::op_host {

// The inputs the tiling reads. Absent optional inputs are the zero-size placeholder.
struct SfaTilingInputs {
  const mgo::infer::TensorDesc& query;           // TND [T1, N1, D] / BSND [B, S1, N1, D]
  const mgo::infer::TensorDesc& key;             // [T2, N2, D] / [B, S2, N2, D]
  const mgo::infer::TensorDesc& value;           // like key, or absent (key is value)
  const mgo::infer::TensorDesc& sparse_indices;  // [T1, N2, K] / [B, S1, N2, K]
  const mgo::infer::TensorDesc& query_rope;      // [..., Dr] or absent
  const mgo::infer::TensorDesc& lens_q;          // [B] int32/int64 (TND cumulative, BSND per batch), or absent
  const mgo::infer::TensorDesc& lens_kv;         // like lens_q
  const mgo::infer::TensorDesc& sinks;           // float32 [N1], or absent
};

// The pure tiling's view of the shapes. TND without lengths (one sequence) is batch 0: the pure
// tiling lays it out as BSND with B = 1.
inline mgo::tiling::SfaShape SfaTilingShape(const SfaTilingInputs& in, mgo::table::Layout layout) {
  // The head-dim axis is r - 1, the head axis r - 2.
  const size_t r = CheckTokenRank(layout, {&in.query, &in.key, &in.sparse_indices}, "query/key/sparse_indices");
  mgo::tiling::SfaShape s{};
  s.seq = ReadTokens(layout, in.query, in.key, in.lens_q, in.lens_kv);
  s.n1 = Dim(in.query, r - 2);
  s.n2 = Dim(in.key, r - 2);
  s.d = Dim(in.query, r - 1);
  s.k = Dim(in.sparse_indices, r - 1);
  s.dr = mgo::infer::is_absent(in.query_rope.shape) ? 0 : Dim(in.query_rope, r - 1);
  s.valueAbsent = mgo::infer::is_absent(in.value.shape);
  s.sinksPresent = !mgo::infer::is_absent(in.sinks.shape);
  // Both sides have one integer type (the table's rows); BSND may give the key side alone.
  const mgo::infer::TensorDesc& lens = mgo::infer::is_absent(in.lens_q.shape) ? in.lens_kv : in.lens_q;
  s.seqLensInt64 = lens.dtype == mgo::infer::DType::kInt64;
  return s;
}

// The inputs of op `T` (mgo::table::SparseFlashAttention or ...Grad) the tiling reads.
template <typename T>
SfaTilingInputs SfaTilingInputsOf(const std::vector<mgo::infer::TensorDesc>& in) {
  return {in[T::In::kQuery],          in[T::In::kKey],       in[T::In::kValue],
          in[T::In::kSparseIndices], in[T::In::kQueryRope], in[T::In::kActualSeqLengthsQuery],
          in[T::In::kActualSeqLengthsKv], in[T::In::kSinks]};
}

// Runs `compute` (ComputeSparseFlashAttention(Grad)Tiling) on the inputs of op `T` with its table
// attributes `a`, which the tiling takes as they are. The lengths' values live on the device
// (ValueDepend inputs would become host int arrays in the aclnn signature), so the tiling balances
// rows by count. A mixed launch's block dim counts AI cores (1 AIC + 2 AIV each).
template <typename T, typename Compute>
auto TileSfa(Compute compute, const std::vector<mgo::infer::TensorDesc>& in, mgo::tiling::DType dtype,
             const typename T::Attrs& a, const Platform& p, bool all_cores_at_once) {
  const auto t = compute(SfaTilingShape(SfaTilingInputsOf<T>(in), a.layout), a, dtype,
                         mgo::tiling::SeqLengths{nullptr, nullptr, 0}, CubeOf(p));
  return Plan(t, t.result.data.usedAicNum, t.result.workspaceBytes, all_cores_at_once);
}

}  // namespace mgo::op_host
