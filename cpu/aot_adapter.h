// The one CPU AOT adapter (the counterpart of ascendc/common/op_host_adapter.h): InferShape<Op>,
// InferType<Op> and Launch<Op> turn MindSpore's AOT calls into calls of an op's pure rules
// (infer_shape/<op>.h) and its kernel (cpu/<op>.cc).
//
// The C symbols that call them, one set per op, are generated from the op table
// (cpu/entry_points.cc, scripts/glue/cpu.py): a template cannot give its instances C names. Each
// passes a description `Op` of the op, a struct deriving from its mgo::table struct with
//   Attrs read(AotExtra*)  its attributes, read by their table names;
//   kRule                  InferResult (*)(const std::vector<TensorDesc>&, const Attrs&);
//   kKernel                void (*)(const KernelArgs&, const Attrs&) (params: inputs then outputs).
// Errors are exceptions, as before: MindSpore reports what they say.
#pragma once

#include <cstdint>
#include <vector>

#include "aot.h"

namespace mgo::aot {

// Output shapes of an InferShape call (inputs' shapes known, dtypes unknown).
template <class Op>
std::vector<std::vector<int64_t>> InferShape(int* ndims, int64_t** shapes, AotExtra* extra) {
  return Op::kRule(shape_descs(Op::kNumInputs, ndims, shapes), Op::read(extra)).shapes;
}

// Output dtypes of an InferType call (inputs' dtypes known, shapes unknown).
template <class Op>
std::vector<TypeId> InferType(const std::vector<TypeId>& types, AotExtra* extra) {
  return type_ids(Op::kRule(type_descs(types), Op::read(extra)));
}

// The single-output forms MindSpore also accepts (an op with one output registers these).
template <class Op>
std::vector<int64_t> InferShapeOne(int* ndims, int64_t** shapes, AotExtra* extra) {
  return InferShape<Op>(ndims, shapes, extra).at(0);
}
template <class Op>
TypeId InferTypeOne(const std::vector<TypeId>& types, AotExtra* extra) {
  return InferType<Op>(types, extra).at(0);
}

// One kernel launch: the rules again on the real tensors (a GRAPH-mode infer may have seen unknown
// dims only), then the kernel; returns 0 (errors throw).
template <class Op>
int Launch(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* extra) {
  const KernelArgs args(nparam, params, ndims, shapes, dtypes);
  const typename Op::Attrs attrs = Op::read(static_cast<AotExtra*>(extra));
  std::vector<TensorDesc> in;
  for (int i = 0; i < Op::kNumInputs; ++i) in.push_back(args.desc(i));
  Op::kRule(in, attrs);
  Op::kKernel(args, attrs);
  return 0;
}

}  // namespace mgo::aot
