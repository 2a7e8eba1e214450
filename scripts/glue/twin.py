"""The structs the twin harness passes between Python and C++, both sides from one description:
``tests/ascendc_harness/harness_args.h`` (included by the ``harness_*.cpp`` entry points) and
``tests/ascendc_harness/twin_args.py`` (the ctypes mirrors ``twin_lib.py`` fills).

A field is (name, kind, comment): kind ``int`` is int64_t / ``ctypes.c_int64``, ``float`` is
double / ``ctypes.c_double``. The order is the memory layout on both sides.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from .common import banner

HEADER = "tests/ascendc_harness/harness_args.h"
MODULE = "tests/ascendc_harness/twin_args.py"
CPP = {"int": "int64_t", "float": "double"}
CTYPES = {"int": "_I64", "float": "ctypes.c_double"}


@dataclass(frozen=True)
class Struct:
    name: str
    doc: str
    fields: tuple[tuple[str, str, str], ...]


def _ints(names: str, comment: str = "") -> tuple[tuple[str, str, str], ...]:
    return tuple((n, "int", comment) for n in names.split())


_LAYOUT = (("layout", "int", "0 BSND, 1 TND"),)
_LAUNCH = _ints("core_num ub_bytes seed")  # AI cores (vector cores for vector kernels), UB bytes, hand-off seed

STRUCTS = (
    Struct("RunInfo", "What every kernel entry point measured, for the Python tests.",
           (("ub_peak_bytes", "int", "largest UB footprint of any block, as the twin measured it"),
            ("tiling_ub_bytes", "int", "footprint the tiling function promised"),
            ("blocks", "int", "blocks launched"),
            ("tile_rows", "int", ""),
            ("min_writes", "int", "over every byte of every output: how often it was written"),
            ("max_writes", "int", ""))),
    Struct("SfaArgs", "The shape and attributes of one sparse_flash_attention(_grad) call.",
           (*_LAYOUT, *_ints("batch s1 s2 t1 t2 n1 n2 d dr k"), *_ints("block_size sparse_mode deterministic"),
            ("scale", "float", ""), *_LAUNCH, *_ints("value_absent lens_int64"))),
    Struct("SliArgs", "The shape and attributes of one sparse_lightning_indexer_grad_kl_loss call.",
           (*_LAYOUT, *_ints("batch s1 s2 t1 t2 n1 d dr n_idx d_idx k"),
            *_ints("sparse_mode deterministic weights_f32"), ("scale", "float", ""), *_LAUNCH)),
    Struct("IndexerArgs", "The shape and attributes of one lightning_indexer or lightning_indexer_grad call.",
           (*_LAYOUT, *_ints("batch s1 s2 t1 t2 n_idx d_idx k"), *_ints("sparse_mode weights_f32"), *_LAUNCH)),
)


def _cpp(s: Struct) -> list[str]:
    lines = [f"// {s.doc}", f"struct {s.name} {{"]
    lines += [f"  {CPP[kind]} {name};" + (f"  // {comment}" if comment else "") for name, kind, comment in s.fields]
    return lines + ["};", ""]


def _py(s: Struct) -> list[str]:
    lines = [f"class {s.name}(ctypes.Structure):", f'    """{s.doc}"""', "", "    _fields_ = ["]
    lines += [f'        ("{name}", {CTYPES[kind]}),' + (f"  # {comment}" if comment else "")
              for name, kind, comment in s.fields]
    return lines + ["    ]", "", ""]


def _header() -> str:
    lines = [banner("//").rstrip("\n"),
             f"// The structs the ctypes side ({MODULE}) passes to the harness entry points;",
             "// both sides are generated from scripts/glue/twin.py.", "#pragma once", "", "#include <cstdint>", "",
             "namespace harness {", ""]
    for s in STRUCTS:
        lines += _cpp(s)
    return "\n".join(lines + ["}  // namespace harness"]) + "\n"


def _module() -> str:
    lines = [banner("#").rstrip("\n"),
             f'"""ctypes mirrors of the structs in {HEADER}, from scripts/glue/twin.py."""',
             "from __future__ import annotations", "", "import ctypes", "", "_I64 = ctypes.c_int64", "", ""]
    for s in STRUCTS:
        lines += _py(s)
    return "\n".join(lines).rstrip("\n") + "\n"


def generate(specs: ModuleType) -> dict[str, str]:
    del specs  # the harness structs carry tiling inputs, not the table's
    return {HEADER: _header(), MODULE: _module()}
