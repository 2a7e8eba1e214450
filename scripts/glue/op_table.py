"""``infer_shape/op_table.h``: the table in C++, one struct per op, included by every host C++ layer
(shape rules, CPU kernels, op_host, tiling, twin harness). Inputs and outputs are addressed by
name (``SparseFlashAttentionGrad::In::kQueryRope``), never by a hand-written index.

Attributes: the ``Attrs`` structs and choice enums are ``op_attrs.h`` (shared with the device), the
machinery every reader shares ``attr_reading.h`` (hand-written); here each choice enum gets its
``Choice<E>`` (raw type, name, parse), each op its ``CheckAttrs``, and every domain error its one
wording, ``DOMAIN_ERROR`` of the table."""
from __future__ import annotations

from types import ModuleType

from .common import banner, choice_constants, choice_enum, constant, cpp_literal, cpp_string, raw_cpp_type
from .op_attrs import choice_attrs

PATH = "infer_shape/op_table.h"

# The one wording of every domain error, declared in attr_reading.h (the machinery every reader shares).
_DOMAIN_ERROR = """// The one wording of every attribute domain error (DOMAIN_ERROR of ms_grad_ops/_specs.py), a
// ValueError in every layer.
[[noreturn]] inline void DomainError(const char* op, const char* attr, const std::string& domain,
                                     const std::string& got) {
  throw infer::ValueError({DOMAIN_ERROR});
}
"""


def _wording(specs: ModuleType) -> str:
    """DOMAIN_ERROR as the C++ expression over op, attr, domain and got."""
    parts, rest = [], specs.DOMAIN_ERROR
    for name in ("op", "attr", "domain", "got"):
        before, rest = rest.split("{" + name + "}", 1)
        parts += [cpp_string(before)] if before else []
        parts.append(name if name in ("domain", "got") else f"std::string({name})" if not parts else name)
    parts += [cpp_string(rest)] if rest else []
    return " + ".join(parts)


def _choice(attr: object) -> list[str]:
    enum, raw = choice_enum(attr), raw_cpp_type(attr)
    text = lambda v: f'"{v}"' if attr.type == "str" else str(v)  # noqa: E731 - the raw spelling in C++
    values = list(zip(choice_constants(attr), attr.domain.values))
    lines = [f"// {attr.name}", "template <>", f"struct Choice<{enum}> {{", f"  using Raw = {raw};",
             f'  static constexpr const char* kAttr = "{attr.name}";',
             f"  static constexpr const char* kDomain = {cpp_string(attr.domain.text)};",
             f"  static const char* Name({enum} v) {{", "    switch (v) {"]
    lines += [f"      case {enum}::{c}: return {cpp_string(str(v))};" for (c, _), v in values]
    lines += ["    }", '    return "?";', "  }"]
    if attr.type == "str":
        lines.append(f"  static Raw Value({enum} v) {{ return Name(v); }}")
    else:
        lines.append(f"  static Raw Value({enum} v) {{ return static_cast<Raw>(v); }}")
    lines.append(f"  static {enum} Parse(const char* op, const Raw& raw) {{")
    lines += [f"    if (raw == {text(v)}) return {enum}::{c};" for (c, _), v in values]
    got = '"\\"" + raw + "\\""' if attr.type == "str" else "Got(raw)"
    lines += [f"    DomainError(op, kAttr, kDomain, {got});", "  }", "};"]
    return lines


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


def _check(attr: object, domain: object, where: str, indent: str) -> list[str]:
    """The statement checking ``attr`` against ``domain`` (a choice limit: the allowed enumerators)."""
    text = cpp_string(domain.text + where)
    if choice_enum(attr):
        enum = choice_enum(attr)
        names = dict(zip(attr.domain.values, (c for c, _ in choice_constants(attr))))
        inside = " && ".join(f"a.{attr.name} != {enum}::{names[v]}" for v in domain.values)
        return [f"{indent}if ({inside}) {{",
                f"{indent}  DomainError(kName, \"{attr.name}\", {text}, Choice<{enum}>::Name(a.{attr.name}));",
                f"{indent}}}"]
    if attr.type == "int":
        return [f'{indent}CheckRange<int64_t>(kName, "{attr.name}", a.{attr.name}, {domain.lo}, {domain.hi}, {text});']
    if attr.type == "float":
        return [f'{indent}CheckRange<double>(kName, "{attr.name}", a.{attr.name}, {domain.lo!r}, {domain.hi!r}, '
                f'{text});']
    return []  # a flag has no domain to leave


def _check_attrs(op: object) -> list[str]:
    lines = ["  // The domain error of the first attribute outside its domain on `backend` (choices are inside",
             "  // once parsed: Choice<E>::Parse), thrown; the one check of every reader (SetAttr, then this)."]
    body: list[str] = []
    for a in op.attrs:
        if not choice_enum(a):
            body += _check(a, a.domain, "", "    ")
        for backend, domain in a.limits:
            body += [f"    if (backend == Backend::k{backend}) {{", *_check(a, domain, f" on {backend}", "      "),
                     "    }"]
    if not body:
        return lines + ["  static void CheckAttrs(const Attrs&, Backend) {}"]
    backend = "backend" if any("backend ==" in line for line in body) else "/*backend*/"
    signature = f"  static void CheckAttrs(const Attrs& a, Backend {backend}) {{"
    return lines + [signature, *body, "  }"]


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
    lines.append("  // The primitive's attributes, in table order (op_attrs.h), and the table's defaults (a required")
    lines.append("  // attribute's value-initialised: it has none).")
    lines.append(f"  using Attrs = {op.op_type}Attrs;")
    defaults = ", ".join(cpp_literal(a) for a in op.attrs)
    lines.append(f"  static constexpr Attrs kDefaults{{{defaults}}};")
    lines += _names("Attr", tuple(a.name for a in op.attrs))
    required = ", ".join("true" if a.required else "false" for a in op.attrs)
    lines.append("  // Attributes without a default: the caller must give them (the OpDef declares them REQUIRED).")
    lines.append(f"  static constexpr std::array<bool, {len(op.attrs)}> kAttrRequired{{{required}}};")
    lines.append("  // The Attrs fields in kAttrNames order: readers walk them (their C++ types pick the getter).")
    fields = ", ".join(f"&Attrs::{a.name}" for a in op.attrs)
    lines.append(f"  static constexpr auto kAttrs = std::make_tuple({fields});" if op.attrs
                 else "  static constexpr auto kAttrs = std::tuple<>();")
    lines += _check_attrs(op)
    lines.append("};")
    return lines


def generate(specs: ModuleType) -> dict[str, str]:
    lines = [banner("//").rstrip("\n"), "#pragma once", "", "#include <array>", "#include <cstdint>",
             "#include <string>", "#include <tuple>", "#include <vector>", "", '#include "attr_reading.h"',
             '#include "common.h"', '#include "op_attrs.h"', "", "namespace mgo::table {", "",
             _DOMAIN_ERROR.replace("{DOMAIN_ERROR}", _wording(specs))]
    for attr in choice_attrs(specs):
        lines += _choice(attr) + [""]
    for op in specs.OP_SPECS.values():
        lines += _op(op) + [""]
    lines.append("}  // namespace mgo::table")
    return {PATH: "\n".join(lines) + "\n"}
