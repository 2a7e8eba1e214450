"""The Ascend op_host OpDefs and kernel entry points use exactly the names, order, attributes
and dtypes of ms_grad_ops._specs.OP_SPECS, the table the MindSpore reg_info is built from.

The op_host sources need the CANN toolkit to compile (absent here), so they are checked by
parsing: a renamed input in either place fails this test instead of failing on a device.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ms_grad_ops._specs import OP_SPECS

ASCENDC = Path(__file__).resolve().parents[1] / "ascendc"
OPS = ("rope", "rope_grad", "cla_gate_merge", "cla_gate_backward")
GE_DTYPES = {"DT_FLOAT16": "float16", "DT_BF16": "bfloat16", "DT_FLOAT": "float32", "DT_INT32": "int32",
             "DT_INT64": "int64"}
ATTR_TYPES = {"String": "str", "Int": "int", "Float": "float", "Bool": "bool", "ListInt": "listInt"}

PARAM = re.compile(r'this->(Input|Output)\("(\w+)"\)\s*\.ParamType\((REQUIRED|OPTIONAL)\)\s*'
                   r'\.DataType\(\{([^}]*)\}\)\s*\.Format\(\{([^}]*)\}\)')
ATTR = re.compile(r'this->Attr\("(\w+)"\)\s*\.AttrType\(OPTIONAL\)\s*\.(\w+)\(([^)]*)\)')
KERNEL = re.compile(r'extern "C" __global__ __aicore__ void (\w+)\(([^)]*)\)')


def opdef(op: str) -> dict[str, object]:
    src = (ASCENDC / op / "op_host" / f"{op}.cpp").read_text()
    params = PARAM.findall(src)
    cls = re.search(r"class (\w+) : public OpDef", src)
    added = re.search(r"OP_ADD\((\w+)\);", src)
    return {
        "class": cls.group(1) if cls else None,
        "op_add": added.group(1) if added else None,
        "inputs": tuple(name for kind, name, _, _, _ in params if kind == "Input"),
        "outputs": tuple(name for kind, name, _, _, _ in params if kind == "Output"),
        "input_params": tuple(param for kind, _, param, _, _ in params if kind == "Input"),
        "output_params": tuple(param for kind, _, param, _, _ in params if kind == "Output"),
        "dtypes": [[GE_DTYPES[d.strip().removeprefix("ge::")] for d in dts.split(",")] for *_, dts, _ in params],
        "formats": [[f.strip() for f in fmts.split(",")] for *_, fmts in params],
        "attrs": ATTR.findall(src),
        "socs": re.findall(r'AddConfig\("(\w+)"\)', src),
    }


@pytest.mark.parametrize("op", OPS)
def test_opdef_names_match_spec(op: str) -> None:
    spec, d = OP_SPECS[op], opdef(op)
    assert d["class"] == spec.op_type and d["op_add"] == spec.op_type
    assert d["inputs"] == spec.inputs
    assert d["outputs"] == spec.outputs


@pytest.mark.parametrize("op", OPS)
def test_opdef_attrs_match_spec(op: str) -> None:
    spec = OP_SPECS[op]
    attrs = [(name, ATTR_TYPES[kind], value.strip().strip('"')) for name, kind, value in opdef(op)["attrs"]]
    assert attrs == [(a.name, a.type, str(a.default)) for a in spec.attrs]


@pytest.mark.parametrize("op", OPS)
def test_opdef_dtype_combinations_are_spec_combinations(op: str) -> None:
    spec, d = OP_SPECS[op], opdef(op)
    columns = list(zip(*d["dtypes"]))  # one combination per column, over inputs then outputs
    assert len({len(row) for row in d["dtypes"]}) == 1, "every DataType list needs the same length"
    assert all(len(row) == len(d["dtypes"][0]) for row in d["formats"])
    assert all(f == "ge::FORMAT_ND" for row in d["formats"] for f in row)
    extra = set(columns) - set(spec.dtypes)
    assert not extra, f"{op}: OpDef dtype combinations outside OP_SPECS: {extra}"
    assert {"float16", "bfloat16"} <= {c[0] for c in columns}


@pytest.mark.parametrize("op", OPS)
def test_opdef_registers_supported_socs(op: str) -> None:
    socs = opdef(op)["socs"]
    assert {"ascend910b", "ascend910_93"} <= set(socs)  # Atlas A2 / A3
    if op.startswith("cla_gate"):
        assert "ascend950" in socs  # the seed op's own target


@pytest.mark.parametrize("op", OPS)
def test_kernel_entry_matches_spec(op: str) -> None:
    spec = OP_SPECS[op]
    src = (ASCENDC / op / "op_kernel" / f"{op}.cpp").read_text()
    entries = KERNEL.findall(src)
    assert len(entries) == 1
    name, params = entries[0]
    assert name == op  # CANN derives the kernel symbol from the snake_case op name
    names = tuple(p.split()[-1] for p in params.replace("\n", " ").split(","))
    assert names == (*spec.inputs, *spec.outputs, "workspace", "tiling")


@pytest.mark.parametrize("op", OPS)
def test_op_host_calls_the_shared_rules(op: str) -> None:
    # Shape rules live once (infer_shape/<op>.h) and tiling once (<op>_tiling.h).
    src = (ASCENDC / op / "op_host" / f"{op}.cpp").read_text()
    assert f'#include "../../../infer_shape/{op}.h"' in src
    assert f'#include "../{op}_tiling.h"' in src
    assert f"mgo::infer::{op}(" in src


HOST_CONST = re.compile(r"static constexpr (?:const char\*|size_t) (k\w+) = ([^;]+);")
ATTR_READ = re.compile(r'\b(Str|Int|Float|Bool)Attr\(\w+, (\d+), "(\w+)"\)')
READER_TYPES = {"Str": "str", "Int": "int", "Float": "float", "Bool": "bool"}


def host_struct(op: str) -> dict[str, str]:
    src = (ASCENDC / op / "op_host" / f"{op}.cpp").read_text()
    return {name: value.strip().strip('"') for name, value in HOST_CONST.findall(src)}


@pytest.mark.parametrize("op", OPS)
def test_op_host_instantiates_the_shared_adapter(op: str) -> None:
    # One adapter for every op: the op source registers the template's instances and holds no
    # graph-engine context code of its own (that would be a copy of the adapter).
    src = (ASCENDC / op / "op_host" / f"{op}.cpp").read_text()
    spec, d, host = OP_SPECS[op], opdef(op), host_struct(op)
    assert '#include "../../common/op_host_adapter.h"' in src
    for adapter in ("InferShape", "InferDataType", "Tiling"):
        assert f"mgo::op_host::{adapter}<Host>" in src
    assert "Context" not in src, "context handling belongs in common/op_host_adapter.h"
    assert host["kName"] == spec.op_type
    assert int(host["kInputs"]) == len(spec.inputs)
    # Required inputs first: the adapter reads input i < kRequiredInputs as REQUIRED by IR index.
    required = int(host["kRequiredInputs"])
    assert d["input_params"] == ("REQUIRED",) * required + ("OPTIONAL",) * (len(spec.inputs) - required)
    assert set(d["output_params"]) == {"REQUIRED"}


@pytest.mark.parametrize("op", OPS)
def test_op_host_reads_attributes_in_opdef_order(op: str) -> None:
    src = (ASCENDC / op / "op_host" / f"{op}.cpp").read_text()
    reads = sorted((int(i), name, READER_TYPES[kind]) for kind, i, name in ATTR_READ.findall(src))
    assert reads == [(i, a.name, a.type) for i, a in enumerate(OP_SPECS[op].attrs)]


def test_op_host_sources_compile_against_the_documented_api(tmp_path: Path) -> None:
    # tests/cann_stub declares the documented CANN op_host API subset the sources use (not CANN
    # itself): a typo or a type error in code no CI can build with CANN fails here.
    cxx = shutil.which("g++")
    assert cxx, "g++ is required"
    unit = tmp_path / "all_op_host.cpp"  # one translation unit: one compiler start-up
    unit.write_text("".join(f'#include "{ASCENDC / op / "op_host" / op}.cpp"\n' for op in OPS))
    stub = Path(__file__).resolve().parent / "cann_stub"
    result = subprocess.run([cxx, "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", f"-I{stub}", str(unit)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
