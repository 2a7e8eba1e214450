"""The CPU sources share their plumbing: every op's AOT entry points are generated from the op table
(cpu/entry_points.cc, scripts/glue/cpu.py) and go through the one adapter, cpu/aot_adapter.h; an
op's cpu/<op>.cc holds its kernel only and addresses parameters by the table's names
(infer_shape/op_table.h), never by hand-written numbers; the vectorised exp is written once, in
cpu/vector_math.h."""
from __future__ import annotations

import re

import pytest
from _paths import ROOT

from ms_grad_ops._specs import OP_SPECS

CPU = ROOT / "cpu"
ENTRY = re.compile(r'extern "C" [^{;]*?\b(\w+)\(([^)]*)\)\s*\{(.*?)\n\}', re.S)
# A kernel parameter (or a rule input) addressed by a number: args.as<T>(3), args.dim(0, 2), in[4].
NUMBERED_PARAM = re.compile(r"\bargs\.(?:as<[^>]*>|dim|numel|dtype|desc|shape)\(\d|\bin\[\d")


def entry_points(src: str) -> dict[str, str]:
    """{symbol: body} of every ``extern "C"`` function definition in ``src``."""
    return {name: body.strip() for name, _, body in ENTRY.findall(src)}


@pytest.mark.parametrize("op", sorted(OP_SPECS))
def test_entry_points_forward_to_the_adapter(op: str) -> None:
    spec = OP_SPECS[op]
    assert not entry_points((CPU / f"{op}.cc").read_text()), f"{op}: entry points are generated (entry_points.cc)"
    entries = {name: body for name, body in entry_points((CPU / "entry_points.cc").read_text()).items()
               if name in (f"{spec.op_type}InferShape", f"{spec.op_type}InferType", spec.op_type)}
    assert set(entries) == {f"{spec.op_type}InferShape", f"{spec.op_type}InferType", spec.op_type}
    glue = f"{spec.op_type}Glue"
    assert entries[f"{spec.op_type}InferShape"] == f"return InferShape<{glue}>(ndims, shapes, extra);"
    assert entries[f"{spec.op_type}InferType"] == f"return InferType<{glue}>(types, extra);"
    assert entries[spec.op_type] == f"return Launch<{glue}>(nparam, params, ndims, shapes, dtypes, extra);"
    # The return types MindSpore expects, single-output forms for a one-output op: chosen in the
    # adapter by the table's output count.
    generated = (CPU / "entry_points.cc").read_text()
    assert f'extern "C" ShapesOf<{glue}> {spec.op_type}InferShape(' in generated
    assert f'extern "C" TypesOf<{glue}> {spec.op_type}InferType(' in generated
    assert f"struct {glue} : mgo::table::{spec.op_type} {{" in generated
    adapter = (CPU / "aot_adapter.h").read_text()
    one_output = "std::conditional_t<Op::kNumOutputs == 1, "
    assert one_output + "std::vector<int64_t>, std::vector<std::vector<int64_t>>>" in adapter
    assert one_output + "TypeId, std::vector<TypeId>>" in adapter
    src = (CPU / f"{op}.cc").read_text()
    assert '#include "op_kernels.h"' in src
    assert re.search(rf"void (?:[\w:]*::)?{op}\(\s*const aot::KernelArgs& args", src), f"{op}: no kernels::{op}"
    for plumbing in ("KernelArgs args(", "shape_descs(", "type_descs(", "type_ids(", "static_cast<AotExtra*>",
                     "GetAttr"):
        assert plumbing not in src, f"{op}: {plumbing} belongs in cpu/aot_adapter.h or the generated entry points"


@pytest.mark.parametrize("op", sorted(OP_SPECS))
def test_kernel_addresses_parameters_by_table_name(op: str) -> None:
    # Slots come from infer_shape/op_table.h (In::kQuery, OutParam::kDQuery), so the kernel, the rules
    # and the entry points cannot disagree about an input's position.
    src = (CPU / f"{op}.cc").read_text()
    assert f"table::{OP_SPECS[op].op_type}" in src
    assert not NUMBERED_PARAM.findall(src), f"{op}: parameters addressed by number"
    assert not re.search(r"enum\s+Arg\b|constexpr int k\w+ = \d+;", src), f"{op}: a hand-written slot list"


def test_entry_point_parser_sees_a_hand_written_entry() -> None:
    src = ('extern "C" int Foo(int nparam, void** params) {\n  const KernelArgs args(nparam, params);\n'
           '  return 0;\n}\n')
    assert entry_points(src) == {"Foo": "const KernelArgs args(nparam, params);\n  return 0;"}
    assert NUMBERED_PARAM.findall("const T* og = args.as<const T>(0);")


def test_one_exp_polynomial() -> None:
    # The Cephes expf coefficient that every copy of the polynomial carries.
    holders = sorted(p.name for p in CPU.iterdir() if p.suffix in (".h", ".cc") and "1.9875691500e-4f" in p.read_text())
    assert holders == ["vector_math.h"]
