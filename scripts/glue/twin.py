"""The structs the twin harness passes between Python and C++, both sides from one description:
``harness_args.h`` (included by the ``harness_*.cpp`` entry points) and ``twin_args.py`` (the
ctypes mirrors ``twin_lib.py`` fills), both in the twin harness folder (``tests/ascend/ascendc_harness``).

A field group is (kind, names, comment): kind ``int`` is int64_t / ``ctypes.c_int64``, ``float``
is double / ``ctypes.c_double``. The order is the memory layout on both sides.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from .common import banner

HARNESS = "tests/ascend/ascendc_harness"
HEADER = f"{HARNESS}/harness_args.h"
MODULE = f"{HARNESS}/twin_args.py"
CPP = {"int": "int64_t", "float": "double"}


@dataclass(frozen=True)
class Struct:
    name: str
    doc: str
    groups: tuple[tuple[str, str, str], ...]
    """(kind, space-separated field names, comment): one C++ declaration, in memory order."""


_LAYOUT = ("int", "layout", "0 BSND, 1 TND")
_LAUNCH = ("int", "core_num ub_bytes seed arch", "AI cores, tiling's UB budget, hand-off seed, __NPU_ARCH__")

STRUCTS = (
    Struct("RunInfo", "What every kernel entry point measured, for the Python tests.",
           (("int", "ub_peak_bytes", "largest UB footprint of any block, as the twin measured it"),
            ("int", "tiling_ub_bytes", "footprint the tiling function promised"),
            ("int", "blocks", "blocks launched"),
            ("int", "tile_rows", ""),
            ("int", "min_writes max_writes", "over every byte of every output: how often it was written"))),
    Struct("SfaArgs", "The shape and attributes of one sparse_flash_attention(_grad) call.",
           (_LAYOUT, ("int", "batch s1 s2 t1 t2 n1 n2 d dr k", ""),
            ("int", "block_size sparse_mode deterministic", ""), ("float", "scale", ""), _LAUNCH,
            ("int", "value_absent lens_int64", "value omitted (key is value); int64 lengths"))),
    Struct("SliArgs", "The shape and attributes of one sparse_lightning_indexer_grad_kl_loss call.",
           (_LAYOUT, ("int", "batch s1 s2 t1 t2 n1 d dr n_idx d_idx k", ""),
            ("int", "sparse_mode deterministic weights_f32", ""), ("float", "scale", ""), _LAUNCH)),
    Struct("IndexerArgs", "The shape and attributes of one lightning_indexer or lightning_indexer_grad call.",
           (_LAYOUT, ("int", "batch s1 s2 t1 t2 n_idx d_idx k", ""), ("int", "sparse_mode weights_f32", ""),
            _LAUNCH)),
)


def _cpp(s: Struct) -> list[str]:
    lines = [f"// {s.doc}", f"struct {s.name} {{"]
    lines += [f"  {CPP[kind]} {', '.join(names.split())};" + (f"  // {comment}" if comment else "")
              for kind, names, comment in s.groups]
    return lines + ["};", ""]


def _py(s: Struct) -> list[str]:
    lines = [f"class {s.name}(ctypes.Structure):", f'    """{s.doc}"""', "", "    _fields_ = ["]
    lines += [f'        *_{kind}("{names}"),' + (f"  # {comment}" if comment else "")
              for kind, names, comment in s.groups]
    return lines + ["    ]", "", ""]


def _header() -> str:
    lines = [banner("//").rstrip("\n"),
             "// The structs the ctypes side (twin_args.py, beside this file) passes to the harness entry points;",
             "// both sides are generated from scripts/glue/twin.py.", "#pragma once", "", "#include <cstdint>", "",
             "namespace harness {", ""]
    for s in STRUCTS:
        lines += _cpp(s)
    return "\n".join(lines + ["}  // namespace harness"]) + "\n"


def _module() -> str:
    lines = [banner("#").rstrip("\n"),
             '"""ctypes mirrors of the structs in harness_args.h (beside this file), from scripts/glue/twin.py."""',
             "from __future__ import annotations", "", "import ctypes", "", "",
             "def _int(names: str) -> list[tuple[str, type]]:",
             "    return [(name, ctypes.c_int64) for name in names.split()]", "", "",
             "def _float(names: str) -> list[tuple[str, type]]:",
             "    return [(name, ctypes.c_double) for name in names.split()]", "", ""]
    for s in STRUCTS:
        lines += _py(s)
    return "\n".join(lines).rstrip("\n") + "\n"


def generate(specs: ModuleType) -> dict[str, str]:
    del specs  # the harness structs carry tiling inputs, not the table's
    return {HEADER: _header(), MODULE: _module()}
