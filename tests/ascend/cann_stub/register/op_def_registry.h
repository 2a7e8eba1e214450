// TEST STUB, not CANN: the subset of CANN's op_host API (ge/gert/ops namespaces) that
// ascendc/common/op_host_*.h and ascendc/*/op_host/*.cpp use, declared as CANN's open host headers
// declare it (metadef inc/external: exe_graph/runtime/*.h, asc/register/op_def*.h; the rows of
// docs/ascend_api.md), so tests/ascend/test_ascendc_op_host.py can compile the op_host sources and
// run their adapters on a machine without CANN. It is no looser than the real API where the
// sources could tell: gert::Shape has no IsUnknownRank (the real one has none); the getters that
// return nullptr in CANN (GetTilingData<T> when the buffer is smaller than T, GetWorkspaceSizes,
// GetOutputShape, GetPlatformInfo) return nullptr here in the same cases, and the setters fail as
// CANN's do. scripts/check_ascend_host.py runs the same sources on the real libraries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ge {

using graphStatus = uint32_t;
constexpr graphStatus GRAPH_SUCCESS = 0;
constexpr graphStatus GRAPH_FAILED = 0xFFFFFFFF;

enum DataType { DT_FLOAT = 0, DT_FLOAT16 = 1, DT_INT32 = 3, DT_INT64 = 9, DT_BOOL = 12, DT_BF16 = 27, DT_UNDEFINED = 28 };
enum Format { FORMAT_ND = 2 };

}  // namespace ge

namespace fe {
// Stub only: the SoC values of runtime's platform .ini (SoCInfo, AICoreSpec) that CANN's
// PlatformAscendC reads; tiling/platform/platform_ascendc.h holds the SoCs.
struct PlatFormInfos {
  const char* soc;        // SoC_version
  const char* shortSoc;   // Short_SoC_version
  uint32_t npuArch;       // NpuArch
  uint32_t aicNum;        // cube_core_cnt
  uint32_t aivNum;        // vector_core_cnt
  uint64_t ubBytes;       // ub_size
  uint64_t l1Bytes;       // l1_size
  uint64_t l0aBytes;      // l0_a_size
  uint64_t l0bBytes;      // l0_b_size
  uint64_t l0cBytes;      // l0_c_size
};
}  // namespace fe

namespace gert {

class Shape {
 public:
  Shape() = default;
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}
  size_t GetDimNum() const { return dims_.size(); }
  int64_t GetDim(size_t i) const { return dims_.at(i); }
  void SetDimNum(size_t n) { dims_.resize(n); }
  void SetDim(size_t i, int64_t v) { dims_.at(i) = v; }
  // No IsUnknownRank: CANN's gert::Shape has none (an unknown rank is the one dim -2).

 private:
  std::vector<int64_t> dims_;
};

class StorageShape {
 public:
  explicit StorageShape(Shape s) : shape_(std::move(s)) {}
  const Shape& GetOriginShape() const { return shape_; }
  const Shape& GetStorageShape() const { return shape_; }

 private:
  Shape shape_;
};

// Attribute values by index; an index the test did not set reads as nullptr.
class RuntimeAttrs {
 public:
  const char* GetStr(size_t i) const { return strs_.count(i) ? strs_.at(i).c_str() : nullptr; }
  const int64_t* GetInt(size_t i) const { return ints_.count(i) ? &ints_.at(i) : nullptr; }
  const float* GetFloat(size_t i) const { return floats_.count(i) ? &floats_.at(i) : nullptr; }
  const bool* GetBool(size_t i) const { return bools_.count(i) ? &bools_.at(i) : nullptr; }
  size_t GetAttrNum() const { return strs_.size() + ints_.size() + floats_.size() + bools_.size(); }
  std::map<size_t, std::string> strs_;  // stub only: set by the test driver
  std::map<size_t, int64_t> ints_;
  std::map<size_t, float> floats_;
  std::map<size_t, bool> bools_;
};

class CompileTimeTensorDesc {
 public:
  explicit CompileTimeTensorDesc(ge::DataType t) : t_(t) {}
  ge::DataType GetDataType() const { return t_; }

 private:
  ge::DataType t_;
};

// Inputs by IR index; `present[i] == false` is an omitted OPTIONAL input (instance count 0).
struct StubInputs {
  std::vector<Shape> shapes;
  std::vector<ge::DataType> dtypes;
  std::vector<bool> present;
};

class ExtendedKernelContext {
 public:
  const RuntimeAttrs* GetAttrs() const { return &attrs_; }
  const CompileTimeTensorDesc* GetRequiredInputDesc(size_t ir) {
    desc_.clear();
    for (ge::DataType t : in_.dtypes) desc_.emplace_back(t);
    return ir < desc_.size() ? &desc_[ir] : nullptr;
  }
  const CompileTimeTensorDesc* GetOptionalInputDesc(size_t ir) {
    const CompileTimeTensorDesc* d = GetRequiredInputDesc(ir);
    return d != nullptr && in_.present[ir] ? d : nullptr;
  }
  RuntimeAttrs attrs_;
  StubInputs in_;
  std::vector<CompileTimeTensorDesc> desc_;
};

class InferShapeContext : public ExtendedKernelContext {
 public:
  const Shape* GetRequiredInputShape(size_t ir) const { return ir < in_.shapes.size() ? &in_.shapes[ir] : nullptr; }
  const Shape* GetOptionalInputShape(size_t ir) const {
    return ir < in_.shapes.size() && in_.present[ir] ? &in_.shapes[ir] : nullptr;
  }
  // nullptr beyond the outputs the context was built with, as in CANN.
  Shape* GetOutputShape(size_t i) { return i < out_.size() ? &out_[i] : nullptr; }
  std::vector<Shape> out_;  // stub only: sized by the test driver
};

class InferDataTypeContext : public ExtendedKernelContext {
 public:
  ge::DataType GetRequiredInputDataType(size_t ir) const { return ir < in_.dtypes.size() ? in_.dtypes[ir] : ge::DT_UNDEFINED; }
  ge::DataType GetOptionalInputDataType(size_t ir) const {
    return ir < in_.dtypes.size() && in_.present[ir] ? in_.dtypes[ir] : ge::DT_UNDEFINED;
  }
  // GRAPH_FAILED beyond the outputs the context was built with, as in CANN.
  ge::graphStatus SetOutputDataType(size_t i, ge::DataType t) {
    if (i >= out_.size()) return ge::GRAPH_FAILED;
    out_[i] = t;
    return ge::GRAPH_SUCCESS;
  }
  std::vector<ge::DataType> out_;  // stub only: sized by the test driver
};

class TilingContext : public ExtendedKernelContext {
 public:
  const StorageShape* GetRequiredInputShape(size_t ir) {
    storage_.clear();
    for (const Shape& s : in_.shapes) storage_.emplace_back(s);
    return ir < storage_.size() ? &storage_[ir] : nullptr;
  }
  const StorageShape* GetOptionalInputShape(size_t ir) {
    const StorageShape* s = GetRequiredInputShape(ir);
    return s != nullptr && in_.present[ir] ? s : nullptr;
  }
  fe::PlatFormInfos* GetPlatformInfo() const { return platform_; }
  // nullptr when the tiling buffer holds fewer than sizeof(T) bytes, as in CANN.
  template <typename T>
  T* GetTilingData() {
    if (tiling_capacity_ < sizeof(T)) return nullptr;
    tiling_.assign((sizeof(T) + 7) / 8, 0);
    return reinterpret_cast<T*>(tiling_.data());
  }
  ge::graphStatus SetBlockDim(uint32_t d) { block_dim_ = d; return ge::GRAPH_SUCCESS; }
  ge::graphStatus SetTilingKey(uint64_t k) { tiling_key_ = k; return ge::GRAPH_SUCCESS; }
  ge::graphStatus SetScheduleMode(uint32_t m) { schedule_mode_ = m; return ge::GRAPH_SUCCESS; }
  // nullptr when the context has room for fewer sizes (none unless the builder gave some), as in CANN.
  size_t* GetWorkspaceSizes(size_t n) {
    if (n > workspace_capacity_) return nullptr;
    workspace_.assign(n, 0);
    return workspace_.data();
  }
  fe::PlatFormInfos* platform_ = nullptr;  // stub only: set by the test driver
  size_t tiling_capacity_ = 0;
  size_t workspace_capacity_ = 0;
  std::vector<StorageShape> storage_;
  std::vector<uint64_t> tiling_;  // 8-byte words: aligned for any tiling struct
  uint32_t block_dim_ = 0;
  uint64_t tiling_key_ = 0;
  uint32_t schedule_mode_ = 0;
  std::vector<size_t> workspace_;
};

}  // namespace gert

namespace ops {

enum Option { IGNORE = 0, OPTIONAL = 1, REQUIRED = 2, DYNAMIC = 3, VIRTUAL = 4 };

using InferShapeFn = ge::graphStatus (*)(gert::InferShapeContext*);
using InferDataTypeFn = ge::graphStatus (*)(gert::InferDataTypeContext*);
using TilingFn = ge::graphStatus (*)(gert::TilingContext*);

class OpParamDef {
 public:
  OpParamDef& ParamType(Option o) { param_ = o; return *this; }
  OpParamDef& DataType(std::vector<ge::DataType> t) { dtypes_ = std::move(t); return *this; }
  OpParamDef& Format(std::vector<ge::Format> f) { formats_ = std::move(f); return *this; }
  Option param_ = REQUIRED;
  std::vector<ge::DataType> dtypes_;
  std::vector<ge::Format> formats_;
};

class OpAttrDef {
 public:
  OpAttrDef& AttrType(Option o) { param_ = o; return *this; }
  OpAttrDef& String(const char* v) { kind_ = "str"; value_ = v; return *this; }
  OpAttrDef& Int(int64_t v) { kind_ = "int"; value_ = std::to_string(v); return *this; }
  OpAttrDef& Float(float v) { kind_ = "float"; value_ = std::to_string(v); return *this; }
  OpAttrDef& Bool(bool v) { kind_ = "bool"; value_ = v ? "True" : "False"; return *this; }
  Option param_ = OPTIONAL;
  std::string kind_;
  std::string value_;
};

class OpAICoreDef {
 public:
  OpAICoreDef& SetTiling(TilingFn f) { tiling_ = f; return *this; }
  OpAICoreDef& AddConfig(const char* soc) { socs_.emplace_back(soc); return *this; }
  TilingFn tiling_ = nullptr;
  std::vector<std::string> socs_;
};

class OpDef {
 public:
  explicit OpDef(const char* name) : name_(name) {}
  OpParamDef& Input(const char* n) { inputs_.emplace_back(n, OpParamDef{}); return inputs_.back().second; }
  OpParamDef& Output(const char* n) { outputs_.emplace_back(n, OpParamDef{}); return outputs_.back().second; }
  OpAttrDef& Attr(const char* n) { attrs_.emplace_back(n, OpAttrDef{}); return attrs_.back().second; }
  OpDef& SetInferShape(InferShapeFn f) { infer_shape_ = f; return *this; }
  OpDef& SetInferDataType(InferDataTypeFn f) { infer_dtype_ = f; return *this; }
  OpAICoreDef& AICore() { return aicore_; }
  std::string name_;
  std::vector<std::pair<std::string, OpParamDef>> inputs_;
  std::vector<std::pair<std::string, OpParamDef>> outputs_;
  std::vector<std::pair<std::string, OpAttrDef>> attrs_;
  InferShapeFn infer_shape_ = nullptr;
  InferDataTypeFn infer_dtype_ = nullptr;
  OpAICoreDef aicore_;
};

// Stub registry: OP_ADD(Name) constructs the OpDef once and files it under its type name.
inline std::map<std::string, std::function<OpDef()>>& StubRegistry() {
  static std::map<std::string, std::function<OpDef()>> registry;
  return registry;
}

}  // namespace ops

#define OP_ADD(Name) \
  static const bool kStubAdded##Name = (::ops::StubRegistry()[#Name] = [] { return ::ops::OpDef(Name(#Name)); }, true)
