// The MindSpore 2.10 CPU AOT interface, as this library sees it.
//
// MindSpore's own custom_aot_extra.h cannot be included standalone, so AotExtra is re-declared
// here with the same layout (virtual destructor, HasAttr, then the getters in MindSpore's order,
// then the two data members). Access specifiers do not change the layout, so the getters are
// public here. The library is built with the old C++ string ABI, like MindSpore.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "../infer_shape/common.h"

namespace mindspore {

class AotKernelData {
 public:
  virtual ~AotKernelData() = default;
};

class AotExtra {
 public:
  virtual ~AotExtra() = default;
  virtual bool HasAttr(std::string name) = 0;
  virtual bool GetAttrBool(std::string name) = 0;
  virtual int64_t GetAttrInt(std::string name) = 0;
  virtual float GetAttrFloat(std::string name) = 0;
  virtual std::string GetAttrStr(std::string name) = 0;
  virtual std::vector<int64_t> GetAttrIntVec(std::string name) = 0;
  virtual std::vector<float> GetAttrFloatVec(std::string name) = 0;
  virtual std::vector<std::vector<int64_t>> GetAttrInt2DVec(std::string name) = 0;
  virtual std::vector<std::vector<float>> GetAttrFloat2DVec(std::string name) = 0;

 private:
  std::vector<size_t> workspace_;
  AotKernelData* kernel_data_{nullptr};
};

}  // namespace mindspore

namespace mgo::aot {

using mindspore::AotExtra;
using infer::DType;
using infer::Shape;
using infer::TensorDesc;

// MindSpore's TypeId values (mindapi/base/type_id.h) of the number dtypes, in TypeId order.
enum TypeId : int {
  kTypeUnknown = 0,
  kNumberTypeBool = 30,
  kNumberTypeInt8 = 32,
  kNumberTypeInt16 = 33,
  kNumberTypeInt32 = 34,
  kNumberTypeInt64 = 35,
  kNumberTypeUInt8 = 37,
  kNumberTypeUInt16 = 38,
  kNumberTypeUInt32 = 39,
  kNumberTypeUInt64 = 40,
  kNumberTypeFloat16 = 42,
  kNumberTypeFloat32 = 43,
  kNumberTypeFloat64 = 44,
  kNumberTypeBFloat16 = 45,
  kNumberTypeFloat8E4M3FN = 46,
  kNumberTypeFloat8E5M2 = 47,
  kNumberTypeHiFloat8 = 48,
  kNumberTypeComplex64 = 51,
  kNumberTypeComplex128 = 52,
  kNumberTypeInt4 = 53,
};

struct TypeIdName {
  TypeId id;
  DType dtype;
};

inline constexpr TypeIdName kTypeIds[] = {
    {kNumberTypeBool, DType::kBool},           {kNumberTypeInt8, DType::kInt8},
    {kNumberTypeInt16, DType::kInt16},         {kNumberTypeInt32, DType::kInt32},
    {kNumberTypeInt64, DType::kInt64},         {kNumberTypeUInt8, DType::kUInt8},
    {kNumberTypeUInt16, DType::kUInt16},       {kNumberTypeUInt32, DType::kUInt32},
    {kNumberTypeUInt64, DType::kUInt64},       {kNumberTypeFloat16, DType::kFloat16},
    {kNumberTypeFloat32, DType::kFloat32},     {kNumberTypeFloat64, DType::kFloat64},
    {kNumberTypeBFloat16, DType::kBFloat16},   {kNumberTypeFloat8E4M3FN, DType::kFloat8E4M3FN},
    {kNumberTypeFloat8E5M2, DType::kFloat8E5M2}, {kNumberTypeHiFloat8, DType::kHiFloat8},
    {kNumberTypeComplex64, DType::kComplex64}, {kNumberTypeComplex128, DType::kComplex128},
    {kNumberTypeInt4, DType::kInt4},
};

// An unlisted TypeId is a dtype the rules reject (kOther), never one they skip (kUnknown).
inline DType from_type_id(TypeId t) {
  if (t == kTypeUnknown) return DType::kUnknown;
  for (const TypeIdName& e : kTypeIds) {
    if (e.id == t) return e.dtype;
  }
  return DType::kOther;
}

inline TypeId to_type_id(DType t) {
  for (const TypeIdName& e : kTypeIds) {
    if (e.dtype == t) return e.id;
  }
  return kTypeUnknown;
}

// Inputs of an InferShape call: shapes known (dims may be -1 / rank -2), dtypes unknown.
inline std::vector<TensorDesc> shape_descs(int n, const int* ndims, int64_t* const* shapes) {
  std::vector<TensorDesc> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[i].shape = Shape(shapes[i], shapes[i] + ndims[i]);
  return out;
}

// Inputs of an InferType call: dtypes known, shapes unknown.
inline std::vector<TensorDesc> type_descs(const std::vector<TypeId>& types) {
  std::vector<TensorDesc> out(types.size());
  for (size_t i = 0; i < types.size(); ++i) out[i].dtype = from_type_id(types[i]);
  return out;
}

inline std::vector<TypeId> type_ids(const infer::InferResult& r) {
  std::vector<TypeId> out;
  for (DType t : r.dtypes) out.push_back(to_type_id(t));
  return out;
}

// The tensors of one kernel launch: params = inputs then outputs.
class KernelArgs {
 public:
  KernelArgs(int nparam, void** params, const int* ndims, int64_t* const* shapes, const char* const* dtypes)
      : nparam_(nparam), params_(params), ndims_(ndims), shapes_(shapes), dtypes_(dtypes) {}

  int count() const { return nparam_; }
  void* data(int i) const { return params_[i]; }
  template <typename T>
  T* as(int i) const { return static_cast<T*>(params_[i]); }
  Shape shape(int i) const { return Shape(shapes_[i], shapes_[i] + ndims_[i]); }
  int64_t dim(int i, int d) const { return shapes_[i][d]; }
  int64_t numel(int i) const {
    int64_t n = 1;
    for (int d = 0; d < ndims_[i]; ++d) n *= shapes_[i][d];
    return n;
  }
  DType dtype(int i) const { return infer::parse_dtype(dtypes_[i]); }
  TensorDesc desc(int i) const { return {shape(i), dtype(i)}; }

 private:
  int nparam_;
  void** params_;
  const int* ndims_;
  int64_t* const* shapes_;
  const char* const* dtypes_;
};

}  // namespace mgo::aot
