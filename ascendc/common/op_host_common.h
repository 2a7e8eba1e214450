// CANN-only conversions under the op_host adapter (op_host_adapter.h): graph-engine dtypes and
// shapes to and from the project's infer_shape/ types, error logging, and the SoC's cores and
// memory sizes.
//
// NOT COMPILED IN THIS REPOSITORY'S CI: it needs the CANN toolkit headers (register/, tiling/),
// which are not installed here. scripts/build_ascend.sh compiles it where ASCEND_HOME_PATH is
// set. Keep it thin: every decision lives in the pure, tested headers it calls.
#pragma once

#include <cstdint>
#include <cstdio>

#include "register/op_def_registry.h"
#include "tiling/platform/platform_ascendc.h"

#include "../../infer_shape/common.h"
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

inline mgo::infer::Shape FromGe(const gert::Shape& s) {
  if (s.IsUnknownRank()) return {mgo::infer::kUnknownRank};
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

// Core counts and per-core memory sizes of the SoC the op is being compiled for.
struct Platform {
  uint32_t aivNum;  // vector cores: the block dim of a vector-only kernel
  uint32_t aicNum;  // cube cores: the block dim of a mixed (1 AIC + 2 AIV) kernel
  uint64_t ubBytes;
  uint64_t l1Bytes;
  uint64_t l0aBytes;
  uint64_t l0bBytes;
  uint64_t l0cBytes;
  uint32_t sysWorkspace;
};

inline Platform QueryPlatform(gert::TilingContext* ctx) {
  const auto ascendc = platform_ascendc::PlatformAscendC(ctx->GetPlatformInfo());
  Platform p{ascendc.GetCoreNumAiv(), ascendc.GetCoreNumAic(), 0, 0, 0, 0, 0, ascendc.GetLibApiWorkSpaceSize()};
  ascendc.GetCoreMemSize(platform_ascendc::CoreMemType::UB, p.ubBytes);
  ascendc.GetCoreMemSize(platform_ascendc::CoreMemType::L1, p.l1Bytes);
  ascendc.GetCoreMemSize(platform_ascendc::CoreMemType::L0_A, p.l0aBytes);
  ascendc.GetCoreMemSize(platform_ascendc::CoreMemType::L0_B, p.l0bBytes);
  ascendc.GetCoreMemSize(platform_ascendc::CoreMemType::L0_C, p.l0cBytes);
  return p;
}

}  // namespace mgo::op_host
