"""``infer_shape/op_table.h``: the table in C++, one struct per op, included by every C++ layer
(shape rules, CPU kernels, op_host, tiling, twin harness). Inputs and outputs are addressed by
name (``SparseFlashAttentionGrad::In::kQueryRope``), never by a hand-written index."""
from __future__ import annotations

from types import ModuleType

from .common import banner, constant, cpp_literal, cpp_type

PATH = "infer_shape/op_table.h"


def _names(kind: str, names: tuple[str, ...]) -> list[str]:
    body = ", ".join(f'"{n}"' for n in names)
    return [f"  static constexpr std::array<const char*, {len(names)}> k{kind}Names{{{body}}};"]


def _enum(kind: str, names: tuple[str, ...]) -> list[str]:
    members = ", ".join(f"{constant(n)} = {i}" for i, n in enumerate(names))
    return [f"  struct {kind} {{", f"    enum : int {{ {members} }};", "  };"]


def _out_params(op: object) -> list[str]:
    """Kernel parameter positions of the outputs (a kernel's params are its inputs, then its outputs)."""
    members = ", ".join(f"{constant(n)} = {len(op.inputs) + i}" for i, n in enumerate(op.outputs))
    return ["  // An output's kernel parameter: kNumInputs + its Out index.",
            "  struct OutParam {", f"    enum : int {{ {members} }};", "  };"]


def _op(op: object) -> list[str]:
    lines = [f"// {op.name}", f"struct {op.op_type} {{",
             f'  static constexpr const char* kName = "{op.name}";',
             f'  static constexpr const char* kOpType = "{op.op_type}";',
             f"  static constexpr int kNumInputs = {len(op.inputs)};",
             f"  static constexpr int kNumOutputs = {len(op.outputs)};"]
    lines += _enum("In", op.inputs) + _enum("Out", op.outputs)
    lines += _out_params(op)
    lines += _names("Input", op.inputs) + _names("Output", op.outputs)
    optional = ", ".join("true" if n in op.optional else "false" for n in op.inputs)
    lines.append(f"  static constexpr std::array<bool, {len(op.inputs)}> kOptional{{{optional}}};")
    lines.append("  // The primitive's attributes, in table order, with the table's defaults.")
    lines.append("  struct Attrs {")
    lines += [f"    {cpp_type(a)} {a.name} = {cpp_literal(a)};" for a in op.attrs]
    lines.append("  };")
    lines += _names("Attr", tuple(a.name for a in op.attrs))
    lines.append("  // The Attrs fields in kAttrNames order: readers walk them (their C++ types pick the getter).")
    fields = ", ".join(f"&Attrs::{a.name}" for a in op.attrs)
    lines.append(f"  static constexpr auto kAttrs = std::make_tuple({fields});" if op.attrs
                 else "  static constexpr auto kAttrs = std::tuple<>();")
    lines.append("};")
    return lines


def generate(specs: ModuleType) -> dict[str, str]:
    lines = [banner("//").rstrip("\n"), "#pragma once", "", "#include <array>", "#include <cstdint>",
             "#include <string>", "#include <tuple>", "#include <vector>", "", "namespace mgo::table {", ""]
    for op in specs.OP_SPECS.values():
        lines += _op(op) + [""]
    lines.append("}  // namespace mgo::table")
    return {PATH: "\n".join(lines) + "\n"}
