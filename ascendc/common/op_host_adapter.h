// The one op_host adapter: InferShape<Op>, InferDataType<Op> and Tiling<Op> turn the graph
// engine's contexts into calls of an op's pure rules (infer_shape/<op>.h) and pure tiling
// (ascendc/<op>/<op>_tiling.h), so an op's op_host source only declares what differs.
//
// CI (no CANN toolkit) compiles and runs it against tests/ascend/cann_stub, a stand-in no looser
// than CANN's API (tests/ascend/test_ascendc_op_host.py, which also holds every op_host source to
// ms_grad_ops/_specs.py); scripts/check_ascend_host.py against CANN's real host libraries built from
// their open sources, on real SoC platforms; scripts/build_ascend.sh where ASCEND_HOME_PATH is set.
//
// An op is a struct `Op` (the op's hand-written `<OpType>Host` of ascendc/<op>/op_host/<op>.cpp,
// derived from its generated `<OpType>Def` of op_host_table.h, which gives Table and Infer):
//   Table       mgo::table::<OpType> (infer_shape/op_table.h): kOpType prefixes every logged error,
//               kOptional says per IR input (OpDef order) whether it is OPTIONAL; an omitted
//               optional input reaches the rules as AbsentInput(); kAttrs lists the Attrs
//               fields in OpDef attribute order (ReadAttrs<Op> below);
//   Infer       static InferResult Infer(const std::vector<TensorDesc>&, const Table::Attrs&): the rule
//               (the Def's calls infer_shape/<op>.h; a Host may wrap it);
//   Tile        static TilingPlan<Data> Tile(const std::vector<TensorDesc>&, tiling::DType,
//               const Table::Attrs&, const Platform&): the pure tiling, through Plan().
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../infer_shape/op_table.h"
#include "op_host_common.h"

namespace mgo::op_host {

// ---------------------------------------------------------------- attributes
// By OpDef attribute index; `name` words the error when the framework passed none.
[[noreturn]] inline void MissingAttr(const char* name) {
  throw std::invalid_argument(std::string("attribute '") + name + "' is missing");
}

template <typename T>
const T* CheckedAttr(const T* value, const char* name) {
  if (value == nullptr) MissingAttr(name);
  return value;
}

inline const gert::RuntimeAttrs& AttrsOf(const gert::RuntimeAttrs* attrs, const char* name) {
  return *CheckedAttr(attrs, name);
}

inline std::string StrAttr(const gert::RuntimeAttrs* a, size_t i, const char* name) {
  return CheckedAttr(AttrsOf(a, name).GetStr(i), name);
}
inline int64_t IntAttr(const gert::RuntimeAttrs* a, size_t i, const char* name) {
  return *CheckedAttr(AttrsOf(a, name).GetInt(i), name);
}
inline double FloatAttr(const gert::RuntimeAttrs* a, size_t i, const char* name) {
  return *CheckedAttr(AttrsOf(a, name).GetFloat(i), name);
}
inline bool BoolAttr(const gert::RuntimeAttrs* a, size_t i, const char* name) {
  return *CheckedAttr(AttrsOf(a, name).GetBool(i), name);
}

// An attribute's raw value (table::RawOf its Table::Attrs field), by the raw C++ type.
inline void ReadAttr(const gert::RuntimeAttrs* a, size_t i, const char* name, std::string& v) {
  v = StrAttr(a, i, name);
}
inline void ReadAttr(const gert::RuntimeAttrs* a, size_t i, const char* name, int64_t& v) { v = IntAttr(a, i, name); }
inline void ReadAttr(const gert::RuntimeAttrs* a, size_t i, const char* name, double& v) { v = FloatAttr(a, i, name); }
inline void ReadAttr(const gert::RuntimeAttrs* a, size_t i, const char* name, bool& v) { v = BoolAttr(a, i, name); }

// Every attribute of op `Op` (see op_host_def.h), in OpDef order: Op::Table::kAttrs lists the
// Table::Attrs fields in the order of Table::kAttrNames, the order DefineOp declares them. A choice
// is parsed, then every domain is checked with the Ascend limits (op_table.h: the one check of
// every reader), so InferShape already refuses what the kernels cannot take.
template <typename Op>
typename Op::Table::Attrs ReadAttrs(const gert::RuntimeAttrs* attrs) {
  using Table = typename Op::Table;
  typename Table::Attrs r{};
  size_t i = 0;
  const auto read = [&](auto field) {
    mgo::table::RawOf<std::remove_reference_t<decltype(r.*field)>> raw{};
    ReadAttr(attrs, i, Table::kAttrNames[i], raw);
    mgo::table::SetAttr(Table::kName, r.*field, raw);
    ++i;
  };
  std::apply([&](auto... field) { (read(field), ...); }, Table::kAttrs);
  Table::CheckAttrs(r, mgo::table::Backend::kAscend);
  return r;
}

// A context getter's result: `p` unless it is nullptr (CANN's getters return nullptr when the
// context is too small for what is asked), which throws "<what> <name>".
template <typename T>
T* Present(T* p, const char* what, const char* name) {
  if (p == nullptr) throw std::invalid_argument(std::string(what) + (*name ? " " : "") + name);
  return p;
}

// A context setter's status: throws "<what> <name>" unless it succeeded.
inline void Succeeded(ge::graphStatus status, const char* what, const char* name) {
  if (status != ge::GRAPH_SUCCESS) throw std::invalid_argument(std::string(what) + (*name ? " " : "") + name);
}

// ---------------------------------------------------------------- inputs by IR index
// An omitted OPTIONAL input, as the rules see it: the zero-size 1-D placeholder the Python layer
// passes for None (infer_shape's is_absent), so both routes give the same result.
inline mgo::infer::TensorDesc AbsentInput() { return {mgo::infer::Shape{0}, mgo::infer::DType::kUnknown}; }

// By IR index (an omitted optional input shifts the instance indices of those after it).
template <typename Op, typename Ctx>
std::vector<mgo::infer::Shape> ReadShapes(Ctx* ctx) {
  std::vector<mgo::infer::Shape> shapes(Op::Table::kOptional.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto* s = Op::Table::kOptional[i] ? ctx->GetOptionalInputShape(i) : ctx->GetRequiredInputShape(i);
    if (s == nullptr && !Op::Table::kOptional[i]) {
      throw std::invalid_argument(std::string("the context has no shape for required input ") +
                                  Op::Table::kInputNames[i]);
    }
    shapes[i] = s == nullptr ? AbsentInput().shape : FromGe(*s);
  }
  return shapes;
}

// Shapes and dtypes, for the tiling.
template <typename Op>
std::vector<mgo::infer::TensorDesc> InputDescs(gert::TilingContext* ctx) {
  const std::vector<mgo::infer::Shape> shapes = ReadShapes<Op>(ctx);
  std::vector<mgo::infer::TensorDesc> in(shapes.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const auto* desc = Op::Table::kOptional[i] ? ctx->GetOptionalInputDesc(i)
                                               : Present(ctx->GetRequiredInputDesc(i),
                                                         "the context has no desc for required input",
                                                         Op::Table::kInputNames[i]);
    in[i] = desc == nullptr ? AbsentInput() : mgo::infer::TensorDesc{shapes[i], FromGe(desc->GetDataType())};
  }
  return in;
}

// Shapes with unknown dtypes: InferShape gets no dtypes.
template <typename Op>
std::vector<mgo::infer::TensorDesc> InputShapes(gert::InferShapeContext* ctx) {
  const std::vector<mgo::infer::Shape> shapes = ReadShapes<Op>(ctx);
  std::vector<mgo::infer::TensorDesc> in(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) in[i].shape = shapes[i];
  return in;
}

// Dtypes with unknown shapes: InferDataType gets no shapes.
template <typename Op>
std::vector<mgo::infer::TensorDesc> InputDtypes(gert::InferDataTypeContext* ctx) {
  std::vector<mgo::infer::TensorDesc> in(Op::Table::kOptional.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (!Op::Table::kOptional[i]) {
      in[i].dtype = FromGe(ctx->GetRequiredInputDataType(i));
    } else if (const ge::DataType t = ctx->GetOptionalInputDataType(i); t == ge::DT_UNDEFINED) {
      in[i] = AbsentInput();
    } else {
      in[i].dtype = FromGe(t);
    }
  }
  return in;
}

// Runs `step`; an exception (the rules' ValueError/TypeError, a missing attribute) is logged
// with the op's name and the graph gets FAILED.
template <typename Step>
ge::graphStatus Guarded(const char* op, Step&& step) {
  try {
    return step();
  } catch (const std::exception& e) {
    LogError(op, e.what());
    return ge::GRAPH_FAILED;
  }
}

// ---------------------------------------------------------------- the adapters
template <typename Op>
ge::graphStatus InferShape(gert::InferShapeContext* ctx) {
  return Guarded(Op::Table::kOpType, [ctx] {
    const mgo::infer::InferResult r = Op::Infer(InputShapes<Op>(ctx), ReadAttrs<Op>(ctx->GetAttrs()));
    for (size_t i = 0; i < r.shapes.size(); ++i) {
      gert::Shape* out = Present(ctx->GetOutputShape(i), "the InferShape context has no shape for output",
                                 Op::Table::kOutputNames[i]);
      out->SetDimNum(r.shapes[i].size());
      for (size_t d = 0; d < r.shapes[i].size(); ++d) out->SetDim(d, r.shapes[i][d]);
    }
    return ge::GRAPH_SUCCESS;
  });
}

template <typename Op>
ge::graphStatus InferDataType(gert::InferDataTypeContext* ctx) {
  return Guarded(Op::Table::kOpType, [ctx] {
    const mgo::infer::InferResult r = Op::Infer(InputDtypes<Op>(ctx), ReadAttrs<Op>(ctx->GetAttrs()));
    for (size_t i = 0; i < r.dtypes.size(); ++i) {
      Succeeded(ctx->SetOutputDataType(i, ToGe(r.dtypes[i])), "the InferDataType context took no dtype for output",
                Op::Table::kOutputNames[i]);
    }
    return ge::GRAPH_SUCCESS;
  });
}

// What an op's Tile returns: the pure tiling result plus how to launch it.
template <typename Data>
struct TilingPlan {
  bool ok;
  const char* error;            // static text when !ok
  Data data;                    // standard-C++ tiling struct (REGISTER_TILING_DEFAULT)
  uint64_t tilingKey;
  uint32_t blockDim;            // vector ops: AIV count; mixed ops: AIC count
  uint64_t userWorkspaceBytes;  // on top of the system workspace
  bool allCoresAtOnce;          // the kernel synchronises across cores (SyncAll): batch schedule
};

// From a pure `{result{ok, error, data}, tilingKey}` tiling.
template <typename Pure>
auto Plan(const Pure& t, uint32_t block_dim, uint64_t user_workspace = 0, bool all_cores_at_once = false)
    -> TilingPlan<decltype(t.result.data)> {
  return {t.result.ok, t.result.error, t.result.data, t.tilingKey, block_dim, user_workspace, all_cores_at_once};
}

template <typename Op>
ge::graphStatus Tiling(gert::TilingContext* ctx) {
  return Guarded(Op::Table::kOpType, [ctx] {
    const std::vector<mgo::infer::TensorDesc> in = InputDescs<Op>(ctx);
    const typename Op::Table::Attrs attrs = ReadAttrs<Op>(ctx->GetAttrs());
    mgo::tiling::DType dtype;
    if (!KernelDtype(in.at(0).dtype, &dtype)) {
      throw std::invalid_argument("the kernel takes float16 or bfloat16 inputs only");
    }
    const Platform platform = QueryPlatform(ctx);
    const auto plan = Op::Tile(in, dtype, attrs, platform);
    if (!plan.ok) throw std::invalid_argument(plan.error);
    using Data = decltype(plan.data);
    // nullptr when the context's tiling buffer is smaller than the struct.
    *Present(ctx->template GetTilingData<Data>(), "the tiling buffer is smaller than the tiling data",
             ("(" + std::to_string(sizeof(Data)) + " bytes)").c_str()) = plan.data;
    Succeeded(ctx->SetBlockDim(plan.blockDim), "the tiling context took no block dim", "");
    Succeeded(ctx->SetTilingKey(plan.tilingKey), "the tiling context took no tiling key", "");
    if (plan.allCoresAtOnce) {  // else a SyncAll can wait for cores never started
      Succeeded(ctx->SetScheduleMode(1), "the tiling context took no schedule mode", "");
    }
    *Present(ctx->GetWorkspaceSizes(1), "the tiling context has no room for", "1 workspace size") =
        platform.sysWorkspace + plan.userWorkspaceBytes;
    return ge::GRAPH_SUCCESS;
  });
}

// Dim `i` of a tiling input as the pure tiling functions take it.
inline uint64_t Dim(const mgo::infer::TensorDesc& t, size_t i) {
  if (i >= t.shape.size() || t.shape[i] < 0) throw std::invalid_argument("tiling needs known input shapes");
  return static_cast<uint64_t>(t.shape[i]);
}

}  // namespace mgo::op_host
