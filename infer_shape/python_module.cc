// pybind11 module `ms_grad_ops._validate`: the shape rules of infer_shape/, callable from Python
// before any kernel runs, raising ValueError / TypeError with the op, argument and shapes.
//
// The bindings, one per op, are generated from the op table (python_bindings.h,
// scripts/glue/pybind.py); this file holds what they share: the translation between Python's
// shapes/dtype names and the rules' descriptors, and the rules' exceptions as Python's.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "python_bindings.h"

namespace py = pybind11;

namespace mgo::bindings {

std::vector<infer::TensorDesc> descs(const Shapes& shapes, const DTypeNames& dtypes) {
  if (shapes.size() != dtypes.size()) throw py::value_error("shapes and dtypes differ in length");
  std::vector<infer::TensorDesc> out(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) out[i] = {shapes[i], infer::parse_dtype(dtypes[i])};
  return out;
}

Outputs outputs(const infer::InferResult& result) {
  DTypeNames names;
  for (auto t : result.dtypes) names.emplace_back(infer::dtype_name(t));
  return {result.shapes, names};
}

}  // namespace mgo::bindings

PYBIND11_MODULE(_validate, m) {
  m.doc() = "Shape/dtype/attribute rules of ms_grad_ops (the same C++ the kernels' infer functions use).";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const mgo::infer::TypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const mgo::infer::ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  mgo::bindings::bind_rules(m);
}
