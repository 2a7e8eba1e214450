"""``ascendc/<op>/op_host/<op>_def.h``: each Ascend op's OpDef and attribute reader, from the table.

The OpDef declares the table's inputs (OPTIONAL exactly for ``optional``) and outputs with one dtype
combination of ``ascend_dtypes`` per column, the attributes with the table's defaults, the shared
adapter (``ascendc/common/op_host_adapter.h``) and the SoCs of ``ascend_socs``. The hand-written
``op_host/<op>.cpp`` keeps only what differs per op, ``<OpType>Host`` (Infer, Tile), and includes
this file after it. File names are unique: ``scripts/build_ascend.sh`` flattens includes by name.
"""
from __future__ import annotations

import textwrap
from types import ModuleType

from .common import banner, cpp_literal

GE_DTYPES = {"float16": "ge::DT_FLOAT16", "bfloat16": "ge::DT_BF16", "float32": "ge::DT_FLOAT",
             "int32": "ge::DT_INT32", "int64": "ge::DT_INT64"}
# AttrSpec.type -> (OpDef default setter, op_host_adapter.h reader)
ATTR_KINDS = {"int": ("Int", "IntAttr"), "float": ("Float", "FloatAttr"), "str": ("String", "StrAttr"),
              "bool": ("Bool", "BoolAttr")}


def def_path(op: object) -> str:
    """Where an op's generated OpDef lives (included by ``op_host/<op>.cpp``)."""
    return f"ascendc/{op.name}/op_host/{op.name}_def.h"


def _attr_kind(op: object, attr: object) -> tuple[str, str]:
    if attr.type not in ATTR_KINDS:
        raise ValueError(f"{op.name}.{attr.name}: no OpDef attribute of type {attr.type} in scripts/glue/ascend.py")
    return ATTR_KINDS[attr.type]


def _reader(op: object) -> list[str]:
    """``<OpType>Op``: the op's Host plus the table's attributes read in OpDef order."""
    table = f"mgo::table::{op.op_type}"
    lines = [f"// {op.op_type} as common/op_host_adapter.h takes it: the hand-written Host (Infer, Tile),",
             "// the table's names and optional inputs, and its attributes read in OpDef order.",
             f"struct {op.op_type}Op : {op.op_type}Host {{",
             f"  using Table = {table};"]
    if not op.attrs:
        lines.append("  static Table::Attrs ReadAttrs(const gert::RuntimeAttrs*) { return {}; }")
    else:
        lines += ["  static Table::Attrs ReadAttrs(const gert::RuntimeAttrs* a) {", "    Table::Attrs r;"]
        lines += [f'    r.{attr.name} = {_attr_kind(op, attr)[1]}(a, {i}, "{attr.name}");'
                  for i, attr in enumerate(op.attrs)]
        lines += ["    return r;", "  }"]
    return lines + ["};"]


def _param(kind: str, name: str, param: str, dtypes: tuple[str, ...]) -> list[str]:
    columns = ", ".join(GE_DTYPES[d] for d in dtypes)
    formats = ", ".join(["ge::FORMAT_ND"] * len(dtypes))
    return [f'    this->{kind}("{name}").ParamType({param}).DataType({{{columns}}})',
            f"        .Format({{{formats}}});"]


def _opdef(op: object) -> list[str]:
    columns = list(zip(*op.ascend_dtypes))  # per parameter, its dtype in every combination
    n_in = len(op.inputs)
    lines = [f"class {op.op_type} : public OpDef {{", " public:",
             f"  explicit {op.op_type}(const char* name) : OpDef(name) {{"]
    for i, name in enumerate(op.inputs):
        lines += _param("Input", name, "OPTIONAL" if name in op.optional else "REQUIRED", columns[i])
    for i, name in enumerate(op.outputs):
        lines += _param("Output", name, "REQUIRED", columns[n_in + i])
    lines += [f'    this->Attr("{a.name}").AttrType(OPTIONAL).{_attr_kind(op, a)[0]}({cpp_literal(a)});'
              for a in op.attrs]
    lines += [f"    using Host = mgo::op_host::{op.op_type}Op;",
              "    this->SetInferShape(mgo::op_host::InferShape<Host>).SetInferDataType(mgo::op_host::InferDataType<Host>);",
              "    this->AICore().SetTiling(mgo::op_host::Tiling<Host>);"]
    lines += [f'    this->AICore().AddConfig("{soc}");' for soc in op.ascend_socs]
    return lines + ["  }", "};", "", f"OP_ADD({op.op_type});"]


def _file(op: object) -> str:
    about = (f"The OpDef of {op.op_type} (table entry {op.name}): inputs, outputs, one dtype combination of "
             f"ascend_dtypes per column, attributes with their defaults, the shared adapter, ascend_socs. Included "
             f"by op_host/{op.name}.cpp after {op.op_type}Host. CANN-only, like the adapter.")
    lines = [banner("//").rstrip("\n"), *textwrap.wrap(about, 100, initial_indent="// ", subsequent_indent="// "),
             "#pragma once", "",
             '#include "../../common/op_host_adapter.h"',
             '#include "../../../infer_shape/op_table.h"', "",
             "namespace mgo::op_host {", ""]
    lines += _reader(op)
    lines += ["", "}  // namespace mgo::op_host", "", "namespace ops {", ""]
    lines += _opdef(op)
    lines += ["", "}  // namespace ops"]
    return "\n".join(lines) + "\n"


def generate(specs: ModuleType) -> dict[str, str]:
    return {def_path(op): _file(op) for op in specs.OP_SPECS.values() if op.ascend_dtypes}
