// CANN-only conversions under the op_host adapter (op_host_adapter.h): graph-engine dtypes and
// shapes to and from the project's infer_shape/ types, and error logging. The SoC's cores and
// memory sizes: op_host_platform.h.
//
// CI compiles it against tests/ascend/cann_stub; scripts/check_ascend_host.py against CANN's real
// host headers and libraries (built from their open sources); scripts/build_ascend.sh where
// ASCEND_HOME_PATH is set. Keep it thin: every decision lives in the pure, tested headers it calls.
#pragma once

#include <cstdint>
#include <cstdio>

#include "register/op_def_registry.h"

#include "../../infer_shape/common.h"
#include "op_host_platform.h"
#include "tiling_common.h"

namespace mgo::op_host {

inline mgo::infer::DType FromGe(ge::DataType t) {
  switch (t) {
    case ge::DT_FLOAT16: return mgo::infer::DType::kFloat16;
    case ge::DT_BF16: return mgo::infer::DType::kBFloat16;
    case ge::DT_FLOAT: return mgo::infer::DType::kFloat32;
    case ge::DT_INT32: return mgo::infer::DType::kInt32;
    case ge::DT_INT64: return mgo::infer::DType::kInt64;
    case ge::DT_BOOL: return mgo::infer::DType::kBool;
    default: return mgo::infer::DType::kUnknown;
  }
}

inline ge::DataType ToGe(mgo::infer::DType t) {
  switch (t) {
    case mgo::infer::DType::kFloat16: return ge::DT_FLOAT16;
    case mgo::infer::DType::kBFloat16: return ge::DT_BF16;
    case mgo::infer::DType::kFloat32: return ge::DT_FLOAT;
    case mgo::infer::DType::kInt32: return ge::DT_INT32;
    case mgo::infer::DType::kInt64: return ge::DT_INT64;
    case mgo::infer::DType::kBool: return ge::DT_BOOL;
    default: return ge::DT_UNDEFINED;
  }
}

// gert::Shape has no unknown-rank query: CANN writes an unknown rank as the one dim -2, as its own
// ops test it (GetDimNum() == 1 && GetDim(0) == -2).
inline bool IsUnknownRank(const gert::Shape& s) { return s.GetDimNum() == 1 && s.GetDim(0) == mgo::infer::kUnknownRank; }

inline mgo::infer::Shape FromGe(const gert::Shape& s) {
  if (IsUnknownRank(s)) return {mgo::infer::kUnknownRank};
  mgo::infer::Shape out(s.GetDimNum());
  for (size_t i = 0; i < out.size(); ++i) out[i] = s.GetDim(i);
  return out;
}

inline mgo::infer::Shape FromGe(const gert::StorageShape& s) { return FromGe(s.GetStorageShape()); }

// Custom op projects have no public logging macro: errors go to stderr, which CANN captures.
inline void LogError(const char* op, const char* msg) { std::fprintf(stderr, "[ms_grad_ops] %s: %s\n", op, msg); }

// The kernels are instantiated for the two 16-bit types only.
inline bool KernelDtype(mgo::infer::DType t, mgo::tiling::DType* out) {
  if (t == mgo::infer::DType::kFloat16) *out = mgo::tiling::DType::kFloat16;
  else if (t == mgo::infer::DType::kBFloat16) *out = mgo::tiling::DType::kBFloat16;
  else return false;
  return true;
}

}  // namespace mgo::op_host
