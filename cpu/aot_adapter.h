// The one CPU AOT adapter (the counterpart of ascendc/common/op_host_adapter.h): InferShape<Op>,
// InferType<Op> and Launch<Op> turn MindSpore's AOT calls into calls of an op's pure rules
// (infer_shape/<op>.h) and its kernel, so an op's cpu/<op>.cc only declares what differs.
//
// MindSpore finds the entry points by symbol name (<OpType>InferShape, <OpType>InferType,
// <OpType>), so each op keeps three one-line `extern "C"` functions that forward here; a template
// cannot give its instances C names.
//
// An op describes itself with a struct `Op`:
//   kInputs  static constexpr int: the number of inputs (OP_SPECS order);
//   Infer    static infer::InferResult Infer(const std::vector<TensorDesc>&, AotExtra*): the rule,
//            with the attributes read from `extra` by name;
//   Run      static void Run(const KernelArgs&, AotExtra*): the kernel (inputs then outputs).
// Errors are exceptions, as before: MindSpore reports what they say.
#pragma once

#include <cstdint>
#include <vector>

#include "aot.h"

namespace mgo::aot {

// Output shapes of an InferShape call (inputs' shapes known, dtypes unknown).
template <class Op>
std::vector<std::vector<int64_t>> InferShape(int* ndims, int64_t** shapes, AotExtra* extra) {
  return Op::Infer(shape_descs(Op::kInputs, ndims, shapes), extra).shapes;
}

// Output dtypes of an InferType call (inputs' dtypes known, shapes unknown).
template <class Op>
std::vector<TypeId> InferType(const std::vector<TypeId>& types, AotExtra* extra) {
  return type_ids(Op::Infer(type_descs(types), extra));
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

// One kernel launch: params are the inputs then the outputs; returns 0 (errors throw).
template <class Op>
int Launch(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* extra) {
  Op::Run(KernelArgs(nparam, params, ndims, shapes, dtypes), static_cast<AotExtra*>(extra));
  return 0;
}

// The input descriptors of a launch, for a kernel that re-runs its rules on the real tensors.
inline std::vector<TensorDesc> input_descs(const KernelArgs& args, int inputs) {
  std::vector<TensorDesc> in;
  for (int i = 0; i < inputs; ++i) in.push_back(args.desc(i));
  return in;
}

}  // namespace mgo::aot
