// pybind11 module `ms_grad_ops._validate`: the shape rules of infer_shape/, callable from Python
// before any kernel runs, raising ValueError / TypeError with the op, argument and shapes.
//
// Each function takes the input shapes (lists of ints) and dtype names ("float16", ...) in the
// op's input order plus all its attributes, and returns (output shapes, output dtype names).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "cla_gate_backward.h"
#include "cla_gate_merge.h"
#include "lightning_indexer.h"
#include "lightning_indexer_grad.h"
#include "rope.h"
#include "rope_grad.h"
#include "sparse_lightning_indexer_grad_kl_loss.h"
#include "sparse_flash_attention.h"
#include "sparse_flash_attention_grad.h"

namespace py = pybind11;
using mgo::infer::InferResult;
using mgo::infer::Shape;
using mgo::infer::TensorDesc;

namespace {

using Outputs = std::pair<std::vector<Shape>, std::vector<std::string>>;

std::vector<TensorDesc> descs(const std::vector<Shape>& shapes, const std::vector<std::string>& dtypes) {
  if (shapes.size() != dtypes.size()) throw py::value_error("shapes and dtypes differ in length");
  std::vector<TensorDesc> out(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) out[i] = {shapes[i], mgo::infer::parse_dtype(dtypes[i])};
  return out;
}

Outputs outputs(const InferResult& r) {
  std::vector<std::string> names;
  for (auto t : r.dtypes) names.emplace_back(mgo::infer::dtype_name(t));
  return {r.shapes, names};
}

}  // namespace

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
  // Each binding takes (shapes, dtypes), then every attribute of the op in ms_grad_ops/_specs.py,
  // in spec order and under the spec's names, also those its rule ignores: callers pass the
  // primitive's attributes as they are, so the two lists cannot drift (tests/all_ops/test_custom_backend.py).
  const py::arg shapes("shapes"), dtypes("dtypes");
  m.def("rope", [](const std::vector<Shape>& s, const std::vector<std::string>& t) {
    return outputs(mgo::infer::rope(descs(s, t), {}));
  }, shapes, dtypes);
  m.def("rope_grad", [](const std::vector<Shape>& s, const std::vector<std::string>& t, const std::string& mode) {
    return outputs(mgo::infer::rope_grad(descs(s, t), {mode}));
  }, shapes, dtypes, py::arg("mode"));
  m.def("cla_gate_merge", [](const std::vector<Shape>& s, const std::vector<std::string>& t) {
    return outputs(mgo::infer::cla_gate_merge(descs(s, t), {}));
  }, shapes, dtypes);
  m.def("cla_gate_backward",
        [](const std::vector<Shape>& s, const std::vector<std::string>& t, const std::string& input_attn_layout) {
          return outputs(mgo::infer::cla_gate_backward(descs(s, t), {input_attn_layout}));
        }, shapes, dtypes, py::arg("input_attn_layout"));
  m.def("lightning_indexer", [](const std::vector<Shape>& s, const std::vector<std::string>& t, int64_t sparse_count,
                                const std::string& layout, int64_t sparse_mode) {
    return outputs(mgo::infer::lightning_indexer(descs(s, t), {sparse_count, layout, sparse_mode}));
  }, shapes, dtypes, py::arg("sparse_count"), py::arg("layout"), py::arg("sparse_mode"));
  m.def("lightning_indexer_grad", [](const std::vector<Shape>& s, const std::vector<std::string>& t,
                                     const std::string& layout, int64_t sparse_mode) {
    return outputs(mgo::infer::lightning_indexer_grad(descs(s, t), {layout, sparse_mode}));
  }, shapes, dtypes, py::arg("layout"), py::arg("sparse_mode"));
  // scale_value and deterministic do not change shapes.
  m.def("sparse_lightning_indexer_grad_kl_loss",
        [](const std::vector<Shape>& s, const std::vector<std::string>& t, double scale_value,
           const std::string& layout, int64_t sparse_mode, bool deterministic) {
          return outputs(mgo::infer::sparse_lightning_indexer_grad_kl_loss(descs(s, t),
                                                                          {scale_value, layout, sparse_mode, deterministic}));
        }, shapes, dtypes, py::arg("scale_value"), py::arg("layout"), py::arg("sparse_mode"), py::arg("deterministic"));
  m.def("sparse_flash_attention", [](const std::vector<Shape>& s, const std::vector<std::string>& t, double scale,
                                     int64_t bs, const std::string& layout, int64_t mode) {
    return outputs(mgo::infer::sparse_flash_attention(descs(s, t), {scale, bs, layout, mode}));
  }, shapes, dtypes, py::arg("scale_value"), py::arg("sparse_block_size"), py::arg("layout"), py::arg("sparse_mode"));
  // deterministic does not change shapes.
  m.def("sparse_flash_attention_grad",
        [](const std::vector<Shape>& s, const std::vector<std::string>& t, double scale, int64_t bs,
           const std::string& layout, int64_t mode, int64_t pre_tokens, int64_t next_tokens, bool deterministic) {
          return outputs(mgo::infer::sparse_flash_attention_grad(
              descs(s, t), {scale, bs, layout, mode, pre_tokens, next_tokens, deterministic}));
        }, shapes, dtypes, py::arg("scale_value"), py::arg("sparse_block_size"), py::arg("layout"), py::arg("sparse_mode"),
        py::arg("pre_tokens"), py::arg("next_tokens"), py::arg("deterministic"));
}
