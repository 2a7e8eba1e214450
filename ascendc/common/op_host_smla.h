// What the op_host descriptions of SparseFlashMla and SparseFlashMlaGrad share: the shapes their pure tilings
// take (smla_tiling_common.h: SmlaShape), read from the inputs of either op by the table's slots.
// CANN-only like op_host_adapter.h; tests/ascend/test_ascendc_op_host.py runs it against tests/ascend/cann_stub.
#pragma once

#include <cstdint>
#include <vector>

#include "op_host_adapter.h"
#include "op_host_tokens.h"
#include "smla_tiling_common.h"

namespace mgo::op_host {

// The SmlaShape of op `T`'s inputs `in` (mgo::table::SparseFlashMla or ...Grad). Absent optional inputs are
// omitted or the zero-size placeholder. TND without cu_seqlens_q is batch 0 (one sequence). The lengths' values
// live on the device: the tilings balance rows by count.
template <typename T>
mgo::tiling::SmlaShape SmlaTilingShape(const std::vector<mgo::infer::TensorDesc>& in, mgo::table::Layout layout) {
  using mgo::infer::is_absent;
  using In = typename T::In;
  const mgo::infer::TensorDesc &q = in[In::kQuery], &ori = in[In::kOriKv], &cmp = in[In::kCmpKv];
  const size_t r = CheckTokenRank(layout, {&q, &ori}, "query/ori_kv");
  const bool has_cmp = !is_absent(cmp.shape);
  if (has_cmp) CheckTokenRank(layout, {&cmp}, "cmp_kv");
  mgo::tiling::SmlaShape s{};
  s.layout = layout;
  const bool bsnd = layout == mgo::table::Layout::kBSND;
  const mgo::infer::TensorDesc& cu_q = in[In::kCuSeqlensQ];
  s.batch = bsnd ? Dim(q, 0) : (is_absent(cu_q.shape) || Dim(cu_q, 0) == 0 ? 0 : Dim(cu_q, 0) - 1);
  const auto rows = [&](const mgo::infer::TensorDesc& x) { return bsnd ? Dim(x, 0) * Dim(x, 1) : Dim(x, 0); };
  s.t1 = rows(q);
  s.t2 = rows(ori);
  s.t3 = has_cmp ? rows(cmp) : 0;
  s.s1 = bsnd ? Dim(q, 1) : 0;
  s.s2 = bsnd ? Dim(ori, 1) : 0;
  s.s3 = bsnd && has_cmp ? Dim(cmp, 1) : 0;
  s.n1 = Dim(q, r - 2);
  s.n2 = Dim(ori, r - 2);
  s.d = Dim(q, r - 1);
  const mgo::infer::TensorDesc &oi = in[In::kOriSparseIndices], &ci = in[In::kCmpSparseIndices];
  s.kOri = is_absent(oi.shape) ? 0 : Dim(oi, r - 1);
  s.kCmp = is_absent(ci.shape) ? 0 : Dim(ci, r - 1);
  s.hasSinks = !is_absent(in[In::kSinks].shape);
  s.hasCmp = has_cmp;
  const int lens[] = {In::kCuSeqlensQ, In::kCuSeqlensOriKv, In::kCuSeqlensCmpKv, In::kSequsedQ,
                      In::kSequsedOriKv, In::kSequsedCmpKv, In::kCmpResidualKv};
  for (uint32_t i = 0; i < static_cast<uint32_t>(mgo::tiling::SmlaLen::kCount); ++i) {
    if (!is_absent(in[lens[i]].shape)) s.lenMask |= 1u << i;
  }
  return s;
}

}  // namespace mgo::op_host
