"""The CPU sources share their plumbing: every kernel's AOT entry points go through the one adapter,
cpu/aot_adapter.h (each op's cpu/<op>.cc holds three one-line ``extern "C"`` forwards, its
``kInputs`` matches the op table, no op source builds the AOT call plumbing itself), and the
vectorised exp is written once, in cpu/vector_math.h."""
from __future__ import annotations

import re

import pytest
from _paths import ROOT

from ms_grad_ops._specs import OP_SPECS

CPU = ROOT / "cpu"
ENTRY = re.compile(r'extern "C" [^{;]*?\b(\w+)\(([^)]*)\)\s*\{(.*?)\n\}', re.S)
K_INPUTS = re.compile(r"static constexpr int kInputs = (\w+(?:::\w+)*);")


def entry_points(src: str) -> dict[str, str]:
    """{symbol: body} of every ``extern "C"`` function definition in ``src``."""
    return {name: body.strip() for name, _, body in ENTRY.findall(src)}


@pytest.mark.parametrize("op", sorted(OP_SPECS))
def test_entry_points_forward_to_the_adapter(op: str) -> None:
    spec = OP_SPECS[op]
    src = (CPU / f"{op}.cc").read_text()
    assert '#include "aot_adapter.h"' in src
    entries = entry_points(src)
    assert set(entries) == {f"{spec.op_type}InferShape", f"{spec.op_type}InferType", spec.op_type}
    single = "One" if len(spec.outputs) == 1 else ""
    struct = f"{spec.op_type}Op"
    assert entries[f"{spec.op_type}InferShape"] == \
        f"return mgo::aot::InferShape{single}<{struct}>(ndims, shapes, extra);"
    assert entries[f"{spec.op_type}InferType"] == f"return mgo::aot::InferType{single}<{struct}>(types, extra);"
    assert entries[spec.op_type] == \
        f"return mgo::aot::Launch<{struct}>(nparam, params, ndims, shapes, dtypes, extra);"
    for plumbing in ("KernelArgs args(", "shape_descs(", "type_descs(", "type_ids(", "static_cast<AotExtra*>"):
        assert plumbing not in src, f"{op}: {plumbing} belongs in cpu/aot_adapter.h"


@pytest.mark.parametrize("op", sorted(OP_SPECS))
def test_op_struct_input_count_is_the_tables(op: str) -> None:
    src = (CPU / f"{op}.cc").read_text()
    (value,) = K_INPUTS.findall(src)
    if not value.isdigit():  # a named constant of the same file: resolve it
        (value,) = re.findall(rf"constexpr int {value.split('::')[-1]} = (\d+);", src)
    assert int(value) == len(OP_SPECS[op].inputs)


def test_entry_point_parser_sees_a_hand_written_entry() -> None:
    src = ('extern "C" int Foo(int nparam, void** params) {\n  const KernelArgs args(nparam, params);\n'
           '  return 0;\n}\n')
    assert entry_points(src) == {"Foo": "const KernelArgs args(nparam, params);\n  return 0;"}


def test_one_exp_polynomial() -> None:
    # The Cephes expf coefficient that every copy of the polynomial carries.
    holders = sorted(p.name for p in CPU.iterdir() if p.suffix in (".h", ".cc") and "1.9875691500e-4f" in p.read_text())
    assert holders == ["vector_math.h"]
