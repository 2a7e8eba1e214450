// The one CPU AOT adapter (the counterpart of ascendc/common/op_host_adapter.h): InferShape<Op>,
// InferType<Op> and Launch<Op> turn MindSpore's AOT calls into calls of an op's pure rules
// (infer_shape/<op>.h) and its kernel (cpu/<op>.cc).
//
// The C symbols that call them, one set per op, are generated from the op table
// (cpu/entry_points.cc, scripts/glue/cpu.py): a template cannot give its instances C names. Each
// passes a description `Op` of the op, a struct deriving from its mgo::table struct (names, slots,
// Attrs and kAttrs) with
//   kRule    InferResult (*)(const std::vector<TensorDesc>&, const Attrs&);
//   kKernel  void (*)(const KernelArgs&, const Attrs&) (params: inputs then outputs).
// Errors are exceptions, as before: MindSpore reports what they say.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../infer_shape/op_table.h"
#include "aot.h"

namespace mgo::aot {

// One attribute, by name, with AotExtra's getter of the field's C++ type.
inline void read_attr(AotExtra* extra, const char* name, int64_t& value) { value = extra->GetAttrInt(name); }
inline void read_attr(AotExtra* extra, const char* name, double& value) { value = extra->GetAttrFloat(name); }
inline void read_attr(AotExtra* extra, const char* name, bool& value) { value = extra->GetAttrBool(name); }
inline void read_attr(AotExtra* extra, const char* name, std::string& value) { value = extra->GetAttrStr(name); }
inline void read_attr(AotExtra* extra, const char* name, std::vector<int64_t>& value) {
  value = extra->GetAttrIntVec(name);
}

// Every attribute of op `Op`, read by its table name as its raw type into its Attrs field (a
// choice parsed), then every domain checked (op_table.h: the one check of every reader).
template <class Op>
typename Op::Attrs read_attrs(AotExtra* extra) {
  typename Op::Attrs attrs{};
  size_t i = 0;
  const auto read = [&](auto field) {
    table::RawOf<std::remove_reference_t<decltype(attrs.*field)>> raw{};
    read_attr(extra, Op::kAttrNames[i++], raw);
    table::SetAttr(Op::kName, attrs.*field, raw);
  };
  std::apply([&](auto... field) { (read(field), ...); }, Op::kAttrs);
  Op::CheckAttrs(attrs, table::Backend::kAny);
  return attrs;
}

// What MindSpore's infer functions return: an op with one output uses the single-output forms.
template <class Op>
using ShapesOf = std::conditional_t<Op::kNumOutputs == 1, std::vector<int64_t>, std::vector<std::vector<int64_t>>>;
template <class Op>
using TypesOf = std::conditional_t<Op::kNumOutputs == 1, TypeId, std::vector<TypeId>>;

// Output shapes of an InferShape call (inputs' shapes known, dtypes unknown).
template <class Op>
ShapesOf<Op> InferShape(int* ndims, int64_t** shapes, AotExtra* extra) {
  auto result = Op::kRule(shape_descs(Op::kNumInputs, ndims, shapes), read_attrs<Op>(extra)).shapes;
  if constexpr (Op::kNumOutputs == 1) {
    return result.at(0);
  } else {
    return result;
  }
}

// Output dtypes of an InferType call (inputs' dtypes known, shapes unknown).
template <class Op>
TypesOf<Op> InferType(const std::vector<TypeId>& types, AotExtra* extra) {
  auto result = type_ids(Op::kRule(type_descs(types), read_attrs<Op>(extra)));
  if constexpr (Op::kNumOutputs == 1) {
    return result.at(0);
  } else {
    return result;
  }
}

// One kernel launch: the rules again on the real tensors (a GRAPH-mode infer may have seen unknown
// dims only), then the kernel; returns 0 (errors throw).
template <class Op>
int Launch(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* extra) {
  const KernelArgs args(nparam, params, ndims, shapes, dtypes);
  const typename Op::Attrs attrs = read_attrs<Op>(static_cast<AotExtra*>(extra));
  std::vector<TensorDesc> in;
  for (int i = 0; i < Op::kNumInputs; ++i) in.push_back(args.desc(i));
  Op::kRule(in, attrs);
  Op::kKernel(args, attrs);
  return 0;
}

}  // namespace mgo::aot
