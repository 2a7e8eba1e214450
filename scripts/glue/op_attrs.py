"""``infer_shape/op_attrs.h``: what the host and the device share of the table, in plain C++17 over
``<cstdint>`` (the Ascend kernels include it through their tiling headers): one enum class per
choice attribute, each op's attributes ``<OpType>Attrs`` (``table::<OpType>::Attrs``) with the
table's defaults, and the sizes a backend's kernel bounds (``<OpType>Ascend``)."""
from __future__ import annotations

from types import ModuleType

from .common import banner, camel, choice_constants, choice_enum, cpp_string, cpp_type

PATH = "infer_shape/op_attrs.h"
ABOUT = ("// What the host (rules, CPU kernels, op_host, tilings) and the device (kernels, through their tiling\n"
         "// data) share of the table: one enum class per choice attribute (numbered as the tiling data carries\n"
         "// it: a str choice by its table order, an int choice by its value), each op's attributes\n"
         "// <OpType>Attrs (trivial structs, so tiling data holding them stays trivially copyable), and per op\n"
         "// the sizes its Ascend kernel bounds beyond the shape rules (<OpType>Ascend, each with the text its\n"
         "// tiling refuses the others with). The host-only part (names, defaults, parsing, domain checks) is\n"
         "// op_table.h. Plain C++17 over <cstdint>.")


def choice_attrs(specs: ModuleType) -> list[object]:
    """One attribute per choice enum, in first-use order (attributes of one name share one domain:
    the table checks it)."""
    seen: dict[str, object] = {}
    for op in specs.OP_SPECS.values():
        for a in op.attrs:
            if choice_enum(a):
                seen.setdefault(a.name, a)
    return list(seen.values())


def _enum(attr: object) -> list[str]:
    base = "uint32_t" if attr.type == "str" else "int64_t"
    members = ", ".join(f"{c} = {v}" for c, v in choice_constants(attr))
    return [f"// {attr.name}: {attr.domain.text}", f"enum class {choice_enum(attr)} : {base} {{ {members} }};"]


def _attrs(op: object) -> list[str]:
    lines = [f"// {op.name}: table::{op.op_type}::Attrs, in table order (defaults: table::{op.op_type}::kDefaults)."]
    if not op.attrs:
        return lines + [f"struct {op.op_type}Attrs {{}};"]
    lines.append(f"struct {op.op_type}Attrs {{")
    lines += [f"  {cpp_type(a)} {a.name};" for a in op.attrs]
    return lines + ["};"]


def _sizes(op: object) -> list[str]:
    limits = [(b, s) for b, s in op.size_limits if b == "Ascend"]
    if not limits:
        return []
    lines = [f"// The sizes {op.name}'s Ascend kernel takes beyond the shape rules; its tiling refuses the others.",
             f"struct {op.op_type}Ascend {{"]
    for backend, s in limits:
        lines += [f"  struct {camel(s.name)} {{", f"    static constexpr uint64_t kMin = {s.lo}, kMax = {s.hi};",
                  f"    static constexpr const char* kError = {cpp_string(s.text(backend))};", "  };"]
    return lines + ["};"]


def generate(specs: ModuleType) -> dict[str, str]:
    lines = [banner("//").rstrip("\n"), ABOUT, "#pragma once", "", "#include <cstdint>", "", "namespace mgo::table {",
             ""]
    for attr in choice_attrs(specs):
        lines += _enum(attr) + [""]
    for op in specs.OP_SPECS.values():
        lines += _attrs(op) + [""]
        sizes = _sizes(op)
        lines += sizes + ([""] if sizes else [])
    lines.append("}  // namespace mgo::table")
    return {PATH: "\n".join(lines) + "\n"}
