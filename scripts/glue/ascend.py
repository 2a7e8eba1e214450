"""The Ascend op_host glue, from the table.

- ``ascendc/common/op_host_table.h``: per Ascend op, ``mgo::op_host::<OpType>Def``, what its OpDef
  declares beyond ``infer_shape/op_table.h`` (names, OPTIONAL inputs, attribute defaults): its shape
  rule as ``Infer``, the attribute fields in order, the dtype combinations (``ascend_dtypes``) and
  SoCs (``ascend_socs``).
- ``ascendc/<op>/op_host/<op>_def.h``: the OpDef class and ``OP_ADD``, whose body is the one
  hand-written ``DefineOp<Host>`` of ``ascendc/common/op_host_def.h``. The hand-written
  ``op_host/<op>.cpp`` keeps only ``<OpType>Host : <OpType>Def`` (Tile) and includes it last.

File names are unique: ``scripts/build_ascend.sh`` flattens includes by file name.
"""
from __future__ import annotations

import textwrap
from types import ModuleType

from .common import banner

TABLE = "ascendc/common/op_host_table.h"
GE_DTYPES = {"float16": "ge::DT_FLOAT16", "bfloat16": "ge::DT_BF16", "float32": "ge::DT_FLOAT",
             "int32": "ge::DT_INT32", "int64": "ge::DT_INT64"}
ATTR_TYPES = ("int", "float", "str", "bool")  # what op_host_def.h sets and op_host_adapter.h reads


def def_path(op: object) -> str:
    """Where an op's generated OpDef class lives (included by ``op_host/<op>.cpp``)."""
    return f"ascendc/{op.name}/op_host/{op.name}_def.h"


def _comment(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, 100 - len(indent), initial_indent=indent + "// ", subsequent_indent=indent + "// ")


def _def(op: object) -> list[str]:
    """``<OpType>Def``: what the OpDef declares beyond mgo::table::<OpType>."""
    for attr in op.attrs:
        if attr.type not in ATTR_TYPES:
            raise ValueError(f"{op.name}.{attr.name}: common/op_host_def.h has no {attr.type} attribute")
    n = len(op.inputs) + len(op.outputs)
    socs = ", ".join(f'"{soc}"' for soc in op.ascend_socs)
    lines = [f"// {op.name}", f"struct {op.op_type}Def {{", f"  using Table = mgo::table::{op.op_type};",
             "  static mgo::infer::InferResult Infer(const std::vector<mgo::infer::TensorDesc>& in,",
             "                                       const Table::Attrs& a) {",
             f"    return mgo::infer::{op.name}(in, a);", "  }",
             *_comment("Columns over " + ", ".join((*op.inputs, *op.outputs)) + ".", "  "),
             f"  static constexpr std::array<std::array<ge::DataType, {n}>, {len(op.ascend_dtypes)}> kDtypes{{{{"]
    for combination in op.ascend_dtypes:
        lines += textwrap.wrap("{" + ", ".join(GE_DTYPES[d] for d in combination) + "},", 112,
                               initial_indent=" " * 6, subsequent_indent=" " * 7)
    lines += ["  }};", f"  static constexpr std::array<const char*, {len(op.ascend_socs)}> kSocs{{{socs}}};", "};"]
    return lines


def _table(specs: ModuleType) -> str:
    about = ("What each Ascend op's OpDef declares beyond mgo::table::<OpType> (infer_shape/op_table.h: names, "
             "OPTIONAL inputs, attribute defaults and fields kAttrs): Infer, its shape rule (infer_shape/<op>.h); "
             "kDtypes, the dtype combinations the kernel takes "
             "(ascend_dtypes), one per OpDef column, each over inputs then outputs; kSocs (ascend_socs). "
             "The op's hand-written <OpType>Host (op_host/<op>.cpp) derives from it and adds Tile; DefineOp "
             "(op_host_def.h) turns the Host into the OpDef. CANN-only, like the adapter.")
    lines = [banner("//").rstrip("\n"), *_comment(about), "#pragma once", "", "#include <array>",
             "#include <vector>", "", '#include "register/op_def_registry.h"', "",
             '#include "../../infer_shape/op_table.h"']
    lines += [f'#include "../../infer_shape/{op.name}.h"' for op in specs.OP_SPECS.values() if op.ascend_dtypes]
    lines += ["", "namespace mgo::op_host {", ""]
    for op in specs.OP_SPECS.values():
        if op.ascend_dtypes:
            lines += _def(op) + [""]
    return "\n".join(lines + ["}  // namespace mgo::op_host"]) + "\n"


def _opdef(op: object) -> str:
    about = (f"The OpDef of {op.op_type}, declared from the table (mgo::table::{op.op_type}, "
             f"mgo::op_host::{op.op_type}Def) by DefineOp (common/op_host_def.h). op_host/{op.name}.cpp "
             f"includes this file after {op.op_type}Host. CANN-only, like the adapter.")
    define = f"mgo::op_host::DefineOp<mgo::op_host::{op.op_type}Host>(*this);"
    lines = [banner("//").rstrip("\n"), *_comment(about), "#pragma once", "",
             '#include "../../common/op_host_def.h"', "", "namespace ops {", "",
             f"class {op.op_type} : public OpDef {{", " public:",
             f"  explicit {op.op_type}(const char* name) : OpDef(name) {{", f"    {define}", "  }",
             "};", "", f"OP_ADD({op.op_type});", "", "}  // namespace ops"]
    return "\n".join(lines) + "\n"


def generate(specs: ModuleType) -> dict[str, str]:
    files = {TABLE: _table(specs)}
    files.update({def_path(op): _opdef(op) for op in specs.OP_SPECS.values() if op.ascend_dtypes})
    return files
