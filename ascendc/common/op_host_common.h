// CANN-only glue shared by the op_host sources: adapters from the graph-engine contexts to the
// project's pure rules (infer_shape/<op>.h) and pure tiling (ascendc/<op>/<op>_tiling.h).
//
// NOT COMPILED IN THIS REPOSITORY'S CI: it needs the CANN toolkit headers (register/, tiling/),
// which are not installed here. scripts/build_ascend.sh compiles it where ASCEND_HOME_PATH is
// set. Keep it thin: every decision lives in the pure, tested headers it calls.
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

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

// Shapes only: dtypes are inferred in InferDataType, which gets no shapes.
inline std::vector<mgo::infer::TensorDesc> InputShapes(gert::InferShapeContext* ctx, size_t n) {
  std::vector<mgo::infer::TensorDesc> in(n);
  for (size_t i = 0; i < n; ++i) in[i].shape = FromGe(*ctx->GetInputShape(i));
  return in;
}

inline std::vector<mgo::infer::TensorDesc> InputDtypes(gert::InferDataTypeContext* ctx, size_t n) {
  std::vector<mgo::infer::TensorDesc> in(n);
  for (size_t i = 0; i < n; ++i) in[i].dtype = FromGe(ctx->GetInputDataType(i));
  return in;
}

// Custom op projects have no public logging macro: errors go to stderr, which CANN captures.
inline void LogError(const char* op, const char* msg) { std::fprintf(stderr, "[ms_grad_ops] %s: %s\n", op, msg); }

// Runs a pure rule; its ValueError/TypeError text is logged and the graph gets FAILED.
template <typename Rule>
ge::graphStatus RunRule(const char* op, Rule&& rule) {
  try {
    rule();
    return ge::GRAPH_SUCCESS;
  } catch (const std::exception& e) {
    LogError(op, e.what());
    return ge::GRAPH_FAILED;
  }
}

inline ge::graphStatus WriteShapes(gert::InferShapeContext* ctx, const mgo::infer::InferResult& r) {
  for (size_t i = 0; i < r.shapes.size(); ++i) {
    gert::Shape* out = ctx->GetOutputShape(i);
    out->SetDimNum(r.shapes[i].size());
    for (size_t d = 0; d < r.shapes[i].size(); ++d) out->SetDim(d, r.shapes[i][d]);
  }
  return ge::GRAPH_SUCCESS;
}

inline ge::graphStatus WriteDtypes(gert::InferDataTypeContext* ctx, const mgo::infer::InferResult& r) {
  for (size_t i = 0; i < r.dtypes.size(); ++i) ctx->SetOutputDataType(i, ToGe(r.dtypes[i]));
  return ge::GRAPH_SUCCESS;
}

// The kernels are instantiated for the two 16-bit types only.
inline bool KernelDtype(ge::DataType t, mgo::tiling::DType* out) {
  if (t == ge::DT_FLOAT16) *out = mgo::tiling::DType::kFloat16;
  else if (t == ge::DT_BF16) *out = mgo::tiling::DType::kBFloat16;
  else return false;
  return true;
}

// Vector cores and UB bytes of the SoC the op is being compiled for.
struct Platform {
  uint32_t coreNum;
  uint64_t ubBytes;
  uint32_t sysWorkspace;
};

inline Platform QueryPlatform(gert::TilingContext* ctx) {
  const auto ascendc = platform_ascendc::PlatformAscendC(ctx->GetPlatformInfo());
  uint64_t ub = 0;
  ascendc.GetCoreMemSize(platform_ascendc::CoreMemType::UB, ub);
  return Platform{ascendc.GetCoreNumAiv(), ub, ascendc.GetLibApiWorkSpaceSize()};
}

// Copies the pure tiling result into the framework's buffers.
template <typename TilingData>
ge::graphStatus Publish(gert::TilingContext* ctx, const TilingData& data, uint32_t block_dim, uint64_t key,
                        uint32_t sys_workspace) {
  *ctx->GetTilingData<TilingData>() = data;  // standard-C++ tiling struct (REGISTER_TILING_DEFAULT)
  ctx->SetBlockDim(block_dim);
  ctx->SetTilingKey(key);
  ctx->GetWorkspaceSizes(1)[0] = sys_workspace;  // the kernels need no workspace of their own
  return ge::GRAPH_SUCCESS;
}

}  // namespace mgo::op_host
