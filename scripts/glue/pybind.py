"""``infer_shape/python_bindings.h``: the pybind11 bindings of the shape rules, one ``m.def`` per op.

Each binding ``<op>(shapes, dtypes, <every attribute by its table name>)`` fills the attributes into
``mgo::table::<OpType>::Attrs`` (choices parsed, every domain checked: ``table::SetAttr``,
``CheckAttrs``, as every reader does) and calls the rule ``mgo::infer::<op>`` of ``infer_shape/<op>.h``.
``infer_shape/python_module.cc`` keeps the hand-written translation between Python values and the
rules' descriptors (``descs``, ``outputs``) and the exception translator."""
from __future__ import annotations

from types import ModuleType

from .common import banner, raw_cpp_type, wrap_call

PATH = "infer_shape/python_bindings.h"


def _param(attr: object) -> str:
    """The binding's C++ parameter of an attribute (class types by const reference)."""
    t = raw_cpp_type(attr)
    return f"const {t}& {attr.name}" if t.startswith("std::") else f"{t} {attr.name}"


def _binding(op: object) -> list[str]:
    attrs_type = f"table::{op.op_type}::Attrs"
    params = ["const Shapes& s", "const DTypeNames& t", *(_param(a) for a in op.attrs)]
    lines = [f"  // {op.name}: infer_shape/{op.name}.h", "  m.def(", f'      "{op.name}",']
    lines += wrap_call("      [](", params, ") {", "         ")
    lines.append(f"        {attrs_type} a{{}};")
    lines += [f"        table::SetAttr(table::{op.op_type}::kName, a.{a.name}, {a.name});" for a in op.attrs]
    lines.append(f"        table::{op.op_type}::CheckAttrs(a, table::Backend::kAny);")
    lines.append(f"        return outputs(infer::{op.name}(descs(s, t), a));")
    lines.append("      },")
    lines += wrap_call("      ", ["shapes", "dtypes", *(f'py::arg("{a.name}")' for a in op.attrs)], ");", "      ")
    return lines


def generate(specs: ModuleType) -> dict[str, str]:
    ops = list(specs.OP_SPECS.values())
    lines = [banner("//").rstrip("\n"),
             "// The pybind11 bindings of the shape rules (module ms_grad_ops._validate), one per op of the table:",
             "// <op>(shapes, dtypes, <attributes by keyword>) -> (output shapes, output dtype names). Shapes and",
             "// dtype names come in the op's input order; every attribute of the table is taken under its name,",
             "// also those the rule ignores, so callers pass the primitive's attributes as they are.",
             "#pragma once", "", "#include <pybind11/pybind11.h>", "#include <pybind11/stl.h>", "",
             "#include <cstdint>", "#include <string>", "#include <utility>", "#include <vector>", ""]
    lines += [f'#include "{name}.h"' for name in sorted(op.name for op in ops)]
    lines += ["", "namespace mgo::bindings {", "",
              "using Shapes = std::vector<infer::Shape>;",
              "using DTypeNames = std::vector<std::string>;",
              "using Outputs = std::pair<Shapes, DTypeNames>;", "",
              "// Hand-written in python_module.cc: Python's shapes and dtype names <-> the rules' descriptors.",
              "std::vector<infer::TensorDesc> descs(const Shapes& shapes, const DTypeNames& dtypes);",
              "Outputs outputs(const infer::InferResult& result);", "",
              "inline void bind_rules(pybind11::module_& m) {",
              "  namespace py = pybind11;",
              '  const py::arg shapes("shapes"), dtypes("dtypes");']
    for op in ops:
        lines += _binding(op)
    lines += ["}", "", "}  // namespace mgo::bindings"]
    return {PATH: "\n".join(lines) + "\n"}
