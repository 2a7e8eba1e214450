"""``ascendc/<op>/op_host/<op>_def.h``: what each Ascend op's OpDef declares, from the table.

One generated struct ``<OpType>Op`` per op (derived from the hand-written ``<OpType>Host``, which
keeps only Infer and Tile): the table struct of ``infer_shape/op_table.h`` (names, OPTIONAL inputs,
attribute defaults), the attribute fields in order, the dtype combinations (``ascend_dtypes``) and
the SoCs (``ascend_socs``); and the OpDef class, whose body is the one hand-written
``DefineOp<Op>`` of ``ascendc/common/op_host_def.h``. File names are unique:
``scripts/build_ascend.sh`` flattens includes by name.
"""
from __future__ import annotations

import textwrap
from types import ModuleType

from .common import banner

GE_DTYPES = {"float16": "ge::DT_FLOAT16", "bfloat16": "ge::DT_BF16", "float32": "ge::DT_FLOAT",
             "int32": "ge::DT_INT32", "int64": "ge::DT_INT64"}
ATTR_TYPES = ("int", "float", "str", "bool")  # what op_host_def.h / op_host_adapter.h set and read


def def_path(op: object) -> str:
    """Where an op's generated OpDef lives (included by ``op_host/<op>.cpp``)."""
    return f"ascendc/{op.name}/op_host/{op.name}_def.h"


def _op(op: object) -> list[str]:
    """``<OpType>Op``: the op's Host plus what its OpDef declares."""
    for attr in op.attrs:
        if attr.type not in ATTR_TYPES:
            raise ValueError(f"{op.name}.{attr.name}: common/op_host_def.h has no {attr.type} attribute")
    n = len(op.inputs) + len(op.outputs)
    fields = ", ".join(f"&Table::Attrs::{a.name}" for a in op.attrs)
    attrs = f"std::make_tuple({fields})" if op.attrs else "std::tuple<>()"
    socs = ", ".join(f'"{soc}"' for soc in op.ascend_socs)
    params = textwrap.wrap("One dtype combination per OpDef column, over " + ", ".join((*op.inputs, *op.outputs))
                           + ".", 96, initial_indent="  // ", subsequent_indent="  // ")
    lines = [f"struct {op.op_type}Op : {op.op_type}Host {{",
             f"  using Table = mgo::table::{op.op_type};",
             *textwrap.wrap(f"static constexpr auto kAttrs = {attrs};", 104, initial_indent="  ",
                            subsequent_indent=" " * 49),
             *params,
             f"  static constexpr std::array<std::array<ge::DataType, {n}>, {len(op.ascend_dtypes)}> kDtypes{{{{"]
    lines += ["      {" + ", ".join(GE_DTYPES[d] for d in combination) + "}," for combination in op.ascend_dtypes]
    lines += ["  }};", f"  static constexpr std::array<const char*, {len(op.ascend_socs)}> kSocs{{{socs}}};", "};"]
    return lines


def _opdef(op: object) -> list[str]:
    return [f"class {op.op_type} : public OpDef {{", " public:",
            f"  explicit {op.op_type}(const char* name) : OpDef(name) {{",
            f"    mgo::op_host::DefineOp<mgo::op_host::{op.op_type}Op>(*this);", "  }",
            "};", "", f"OP_ADD({op.op_type});"]


def _file(op: object) -> str:
    about = (f"What the OpDef of {op.op_type} declares, from the table entry {op.name}: names, OPTIONAL "
             f"inputs and attribute defaults through mgo::table::{op.op_type}, the kernel's dtype combinations "
             f"(ascend_dtypes) and SoCs (ascend_socs). DefineOp (common/op_host_def.h) turns it into the OpDef; "
             f"op_host/{op.name}.cpp includes this file after {op.op_type}Host. CANN-only, like the adapter.")
    lines = [banner("//").rstrip("\n"), *textwrap.wrap(about, 100, initial_indent="// ", subsequent_indent="// "),
             "#pragma once", "", "#include <array>", "#include <tuple>", "",
             '#include "../../common/op_host_def.h"', '#include "../../../infer_shape/op_table.h"', "",
             "namespace mgo::op_host {", ""]
    lines += _op(op)
    lines += ["", "}  // namespace mgo::op_host", "", "namespace ops {", ""]
    lines += _opdef(op)
    lines += ["", "}  // namespace ops"]
    return "\n".join(lines) + "\n"


def generate(specs: ModuleType) -> dict[str, str]:
    return {def_path(op): _file(op) for op in specs.OP_SPECS.values() if op.ascend_dtypes}
