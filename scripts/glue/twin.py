"""The structs the twin harness passes between Python and C++, both sides from one description:
``harness_args.h`` (included by the ``harness_*.cpp`` entry points) and ``twin_args.py`` (the
ctypes mirrors ``twin_lib.py`` fills), both in the twin harness folder (``tests/ascend/ascendc_harness``).

- The call structs (``STRUCTS``: run measurements, shapes, the launch) are described here: a field
  group is (kind, names, comment), kind ``int`` is int64_t / ``ctypes.c_int64``, ``float`` is
  double / ``ctypes.c_double``; the order is the memory layout on both sides.
- The attributes come from the table: per Ascend op ``<OpType>AttrArgs`` holds every attribute's raw
  value as an OpDef holds it (int64, double, bool, a choice's name as ``const char*``), and the C++
  ``ToAttrs`` turns it into ``mgo::table::<OpType>::Attrs`` as the op_host does (choices parsed,
  every domain checked with the Ascend limits). A new attribute reaches the tiling and the kernel
  through the twin without a hand edit.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from .common import banner

HARNESS = "tests/ascend/ascendc_harness"
HEADER = f"{HARNESS}/harness_args.h"
MODULE = f"{HARNESS}/twin_args.py"
CPP = {"int": "int64_t", "float": "double"}
# An attribute's raw value as the harness struct holds it (C++, ctypes).
RAW = {"int": ("int64_t", "ctypes.c_int64"), "float": ("double", "ctypes.c_double"), "bool": ("bool", "ctypes.c_bool"),
       "str": ("const char*", "ctypes.c_char_p")}


@dataclass(frozen=True)
class Struct:
    name: str
    doc: str
    groups: tuple[tuple[str, str, str], ...]
    """(kind, space-separated field names, comment): one C++ declaration, in memory order."""


_LAUNCH = ("int", "core_num ub_bytes seed arch", "AI cores, tiling's UB budget, hand-off seed, __NPU_ARCH__")

STRUCTS = (
    Struct("RunInfo", "What every kernel entry point measured, for the Python tests.",
           (("int", "ub_peak_bytes", "largest UB footprint of any block, as the twin measured it"),
            ("int", "tiling_ub_bytes", "footprint the tiling function promised"),
            ("int", "blocks", "blocks launched"),
            ("int", "tile_rows", ""),
            ("int", "min_writes max_writes", "over every byte of every output: how often it was written"))),
    Struct("SfaArgs", "The shape of one sparse_flash_attention(_grad) call and its launch (layout: the attributes').",
           (("int", "batch s1 s2 t1 t2 n1 n2 d dr k", ""), _LAUNCH,
            ("int", "value_absent lens_int64", "value omitted (key is value); int64 lengths"))),
    Struct("SmlaArgs", "The shape of one sparse_flash_mla(_grad) call and its launch.",
           (("int", "batch t1 t2 t3 s1 s2 s3 n1 n2 d k_ori k_cmp", "TND without cu_seqlens_q: batch 0"),
            ("int", "has_cmp has_sinks len_mask lens_known", "len_mask bit i: length input i given"), _LAUNCH)),
    Struct("SmlaGradArgs", "The shape of one sparse_flash_mla_grad call and its launch (layout: the attributes').",
           (("int", "batch s1 s2 s3 t1 t2 t3 n1 n2 d k_ori k_cmp", "BSND: s* padded rows; TND: batch = sequences"),
            _LAUNCH,
            ("int", "has_cmp has_cu has_used_q has_used_ori has_used_cmp has_residual has_sinks",
             "optional inputs given"))),
    Struct("SliArgs", "The shape of one sparse_lightning_indexer_grad_kl_loss call and its launch.",
           (("int", "batch s1 s2 t1 t2 n1 d dr n_idx d_idx k", ""), ("int", "weights_f32", ""), _LAUNCH)),
    Struct("IndexerArgs", "The shape of one lightning_indexer(_grad) call and its launch (k: sparse_indices' slots).",
           (("int", "batch s1 s2 t1 t2 n_idx d_idx k", ""), ("int", "weights_f32", ""), _LAUNCH)),
)


def _ops(specs: ModuleType) -> list[object]:
    """The ops the twin runs (every Ascend op) that have attributes."""
    return [op for op in specs.OP_SPECS.values() if op.ascend_dtypes and op.attrs]


def _cpp(s: Struct) -> list[str]:
    lines = [f"// {s.doc}", f"struct {s.name} {{"]
    lines += [f"  {CPP[kind]} {', '.join(names.split())};" + (f"  // {comment}" if comment else "")
              for kind, names, comment in s.groups]
    return lines + ["};", ""]


def _cpp_attrs(op: object) -> list[str]:
    table = f"mgo::table::{op.op_type}"
    lines = [f"// The attributes of one {op.name} call, raw (mgo::table::{op.op_type}::Attrs once read).",
             f"struct {op.op_type}AttrArgs {{"]
    lines += [f"  {RAW[a.type][0]} {a.name};" for a in op.attrs]
    lines += ["};", "",
              "// As the op_host reads them: choices parsed, every domain checked with the Ascend limits.",
              f"inline {table}::Attrs ToAttrs(const {op.op_type}AttrArgs& raw) {{", f"  {table}::Attrs a{{}};"]
    for a in op.attrs:
        value = f"std::string(raw.{a.name})" if a.type == "str" else f"raw.{a.name}"
        lines.append(f"  mgo::table::SetAttr({table}::kName, a.{a.name}, {value});")
    lines += [f"  {table}::CheckAttrs(a, mgo::table::Backend::kAscend);", "  return a;", "}", ""]
    return lines


def _py(s: Struct) -> list[str]:
    lines = [f"class {s.name}(ctypes.Structure):", f'    """{s.doc}"""', "", "    _fields_ = ["]
    lines += [f'        *_{kind}("{names}"),' + (f"  # {comment}" if comment else "")
              for kind, names, comment in s.groups]
    return lines + ["    ]", "", ""]


def _py_attrs(op: object) -> list[str]:
    lines = [f"class {op.op_type}AttrArgs(ctypes.Structure):",
             f'    """The attributes of one {op.name} call, raw (a choice by its name, as bytes)."""', "",
             "    _fields_ = ["]
    lines += [f'        ("{a.name}", {RAW[a.type][1]}),' for a in op.attrs]
    return lines + ["    ]", "", ""]


def _header(specs: ModuleType) -> str:
    lines = [banner("//").rstrip("\n"),
             "// The structs the ctypes side (twin_args.py, beside this file) passes to the harness entry points;",
             "// both sides are generated from scripts/glue/twin.py, the attribute structs from the table.",
             "#pragma once", "", "#include <cstdint>", "#include <string>", "",
             '#include "../../../infer_shape/op_table.h"', "", "namespace harness {", ""]
    for s in STRUCTS:
        lines += _cpp(s)
    for op in _ops(specs):
        lines += _cpp_attrs(op)
    return "\n".join(lines + ["}  // namespace harness"]) + "\n"


def _module(specs: ModuleType) -> str:
    lines = [banner("#").rstrip("\n"),
             '"""ctypes mirrors of the structs in harness_args.h (beside this file), from scripts/glue/twin.py."""',
             "from __future__ import annotations", "", "import ctypes", "", "",
             "def _int(names: str) -> list[tuple[str, type]]:",
             "    return [(name, ctypes.c_int64) for name in names.split()]", "", "",
             "def _float(names: str) -> list[tuple[str, type]]:",
             "    return [(name, ctypes.c_double) for name in names.split()]", "", ""]
    for s in STRUCTS:
        lines += _py(s)
    for op in _ops(specs):
        lines += _py_attrs(op)
    return "\n".join(lines).rstrip("\n") + "\n"


def generate(specs: ModuleType) -> dict[str, str]:
    return {HEADER: _header(specs), MODULE: _module(specs)}
