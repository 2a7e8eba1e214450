"""The CPU AOT glue: ``cpu/op_kernels.h`` declares each op's kernel, ``cpu/entry_points.cc`` defines
the C symbols MindSpore looks up (``<OpType>InferShape``, ``<OpType>InferType``, ``<OpType>``).

Each entry point calls the one adapter (``cpu/aot_adapter.h``) with a generated description of the
op: its table struct (``infer_shape/op_table.h``, whose ``kAttrs`` the adapter reads the attributes
through), its rule ``mgo::infer::<op>`` (``infer_shape/<op>.h``) and its kernel
``mgo::cpu::kernels::<op>`` (``cpu/<op>.cc``). An op with one output registers MindSpore's
single-output infer forms (``std::vector<int64_t>`` / ``TypeId``, chosen by ``ShapesOf``/``TypesOf``)."""
from __future__ import annotations

from types import ModuleType

from .common import banner, wrap_call

KERNELS = "cpu/op_kernels.h"
ENTRY_POINTS = "cpu/entry_points.cc"

def _kernels(ops: list) -> str:
    lines = [banner("//").rstrip("\n"),
             "// The CPU kernel of every op of the table, defined in cpu/<op>.cc and launched by the generated",
             "// entry points (cpu/entry_points.cc) once the op's rules have passed on the launch's tensors.",
             "// `args` holds the kernel parameters: the inputs (table::<OpType>::In), then the outputs",
             "// (table::<OpType>::OutParam). Errors are exceptions; MindSpore reports what they say.",
             "#pragma once", "", '#include "../infer_shape/op_table.h"', '#include "aot.h"', "",
             "namespace mgo::cpu::kernels {", ""]
    for op in ops:
        params = ["const aot::KernelArgs& args", f"const table::{op.op_type}::Attrs& attrs"]
        lines += wrap_call(f"void {op.name}(", params, ");", " " * (len(op.name) + 6))
    lines += ["", "}  // namespace mgo::cpu::kernels"]
    return "\n".join(lines) + "\n"


def _entry_points(op: object) -> list[str]:
    """The adapter's description of ``op`` (see cpu/aot_adapter.h) and its three C symbols; every op's
    block has the same shape (attributes are read through table::<OpType>::kAttrs)."""
    t = op.op_type
    # Parameters always on a line of their own, so every op's block has the same shape.
    return [f"// {op.name}",
            f"struct {t}Glue : mgo::table::{t} {{",
            f"  static constexpr auto kRule = mgo::infer::{op.name};",
            f"  static constexpr auto kKernel = mgo::cpu::kernels::{op.name};",
            "};",
            f'extern "C" ShapesOf<{t}Glue> {t}InferShape(',
            "    int* ndims, int64_t** shapes, AotExtra* extra) {",
            f"  return InferShape<{t}Glue>(ndims, shapes, extra);", "}",
            f'extern "C" TypesOf<{t}Glue> {t}InferType(',
            "    std::vector<TypeId> types, AotExtra* extra) {",
            f"  return InferType<{t}Glue>(types, extra);", "}",
            f'extern "C" int {t}(',
            "    int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void* /*stream*/,",
            "    void* extra) {",
            f"  return Launch<{t}Glue>(nparam, params, ndims, shapes, dtypes, extra);", "}", ""]


def _entry_file(ops: list) -> str:
    lines = [banner("//").rstrip("\n"),
             "// The C symbols MindSpore's CPU AOT looks up by name for every op of the table: <OpType>InferShape,",
             "// <OpType>InferType and the kernel <OpType>. Each forwards to the one adapter (aot_adapter.h) with",
             "// the op's description <OpType>Glue: its table struct (names, slots, attributes), its rule",
             "// mgo::infer::<op> (infer_shape/<op>.h) and its kernel mgo::cpu::kernels::<op> (cpu/<op>.cc). An op",
             "// with one output uses MindSpore's single-output infer forms (ShapesOf/TypesOf).",
             "#include <cstdint>", "#include <vector>", ""]
    lines += [f'#include "../infer_shape/{name}.h"' for name in sorted(op.name for op in ops)]
    lines += ['#include "aot_adapter.h"', '#include "op_kernels.h"', "",
              "using mgo::aot::AotExtra;", "using mgo::aot::InferShape;", "using mgo::aot::InferType;",
              "using mgo::aot::Launch;", "using mgo::aot::ShapesOf;", "using mgo::aot::TypeId;",
              "using mgo::aot::TypesOf;", ""]
    for op in ops:
        lines += _entry_points(op)
    return "\n".join(lines).rstrip("\n") + "\n"


def generate(specs: ModuleType) -> dict[str, str]:
    ops = list(specs.OP_SPECS.values())
    return {KERNELS: _kernels(ops), ENTRY_POINTS: _entry_file(ops)}
