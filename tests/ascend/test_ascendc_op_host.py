"""The Ascend op_host OpDefs and kernel entry points use exactly the names, order, attributes
and dtypes of ms_grad_ops._specs.OP_SPECS, the table the MindSpore reg_info is built from, and the
op_host adapters run as the pure rules and tilings say.

Every case runs on two builds of the same op_host sources: against tests/ascend/cann_stub (the
stand-in, always) and on CANN's real host libraries built from their open sources by
scripts/check_ascend_host.py (when CANN_METADEF, CANN_RUNTIME, ASC_DEVKIT and LIBBOUNDSCHECK name
the checkouts; skipped otherwise: CI has none). The OpDefs they register are compared with the
table; the rest is checked by parsing: a renamed input in either place fails this test instead of
failing on a device.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from _paths import ROOT, SCRIPTS

from ms_grad_ops._specs import OP_SPECS

ASCENDC = ROOT / "ascendc"
OPS = ("rope", "rope_grad", "cla_gate_merge", "cla_gate_backward", "sparse_flash_attention",
       "sparse_flash_attention_grad", "sparse_lightning_indexer_grad_kl_loss", "lightning_indexer",
       "lightning_indexer_grad", "dense_lightning_indexer_softmax_lse", "dense_lightning_indexer_grad_kl_loss",
       "sparse_flash_mla", "sparse_flash_mla_grad", "sparse_lightning_indexer_kl_loss_grad")
GE_DTYPES = {"DT_FLOAT16": "float16", "DT_BF16": "bfloat16", "DT_FLOAT": "float32", "DT_INT32": "int32",
             "DT_INT64": "int64"}
ATTR_TYPES = {"String": "str", "Int": "int", "Float": "float", "Bool": "bool", "ListInt": "listInt"}

PARAM = re.compile(r'this->(Input|Output)\("(\w+)"\)\s*\.ParamType\((REQUIRED|OPTIONAL)\)\s*'
                   r'\.DataType\(\{([^}]*)\}\)\s*\.Format\(\{([^}]*)\}\)')
ATTR = re.compile(r'this->Attr\("(\w+)"\)\s*\.AttrType\((OPTIONAL|REQUIRED)\)\s*\.(\w+)\(([^)]*)\)')
KERNEL = re.compile(r'extern "C" __global__ __aicore__ void (\w+)\(([^)]*)\)')


def opdef(driver: Path, op: str) -> dict[str, object]:
    # The OpDef the compiled op_host source registers (common/op_host_def.h over the generated
    # <op>_def.h), printed by the stub driver in the syntax of a hand-written OpDef.
    src, _ = run_driver(driver, f"{OP_SPECS[op].op_type} def")
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
def test_opdef_names_match_spec(driver: Path, op: str) -> None:
    spec, d = OP_SPECS[op], opdef(driver, op)
    assert d["class"] == spec.op_type and d["op_add"] == spec.op_type
    assert d["inputs"] == spec.inputs
    assert d["outputs"] == spec.outputs


@pytest.mark.parametrize("op", OPS)
def test_opdef_attrs_match_spec(driver: Path, op: str) -> None:
    # Names, types and order; an attribute with a default is OPTIONAL with it, a required one
    # REQUIRED (its value stands for none, as in CANN's own OpDefs).
    spec = OP_SPECS[op]
    cpp_bool = {"false": "False", "true": "True"}
    attrs = [(name, param, ATTR_TYPES[kind], None if param == "REQUIRED" else
              str(float(v)) if kind == "Float" else cpp_bool.get(v, v))
             for name, param, kind, value in opdef(driver, op)["attrs"] for v in [value.strip().strip('"')]]
    assert attrs == [(a.name, "REQUIRED" if a.required else "OPTIONAL", a.type, None if a.required else str(a.default))
                     for a in spec.attrs]


@pytest.mark.parametrize("op", OPS)
def test_opdef_dtype_combinations_are_spec_combinations(driver: Path, op: str) -> None:
    spec, d = OP_SPECS[op], opdef(driver, op)
    columns = list(zip(*d["dtypes"]))  # one combination per column, over inputs then outputs
    assert len({len(row) for row in d["dtypes"]}) == 1, "every DataType list needs the same length"
    assert all(len(row) == len(d["dtypes"][0]) for row in d["formats"])
    assert all(f == "ge::FORMAT_ND" for row in d["formats"] for f in row)
    assert len(columns) == len(set(columns)) and set(columns) == set(spec.ascend_dtypes)  # the Ascend reg_info's
    assert set(columns) <= set(spec.dtypes)


@pytest.mark.parametrize("op", OPS)
def test_opdef_registers_supported_socs(driver: Path, op: str) -> None:
    socs = opdef(driver, op)["socs"]
    assert {"ascend910b", "ascend910_93"} <= set(socs)  # Atlas A2 / A3
    assert sorted(socs) == sorted(OP_SPECS[op].ascend_socs)  # the table's, CANN's SoCs of the op
    if op.startswith("cla_gate") or op.startswith("sparse_") or op in ("lightning_indexer",
                                                                        "dense_lightning_indexer_softmax_lse"):
        assert "ascend950" in socs  # the seed op's own target; CANN's 950 ops


def test_op_host_and_kernel_exist_for_every_packaged_op() -> None:
    # The ops the custom op package builds: every Ascend-registered op.
    packaged = {name for name, spec in OP_SPECS.items() if spec.ascend_dtypes}
    assert packaged == set(OPS)
    for op in OPS:
        assert all((ASCENDC / op / part / f"{op}.cpp").is_file() for part in ("op_host", "op_kernel")), op


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
    # Shape rules live once (infer_shape/<op>.h, called by the op's generated Def in
    # common/op_host_table.h) and tiling once (<op>_tiling.h, called by op_host/<op>.cpp).
    src = (ASCENDC / op / "op_host" / f"{op}.cpp").read_text()
    assert f'#include "../{op}_tiling.h"' in src and '#include "../../common/op_host_table.h"' in src
    table = (ASCENDC / "common" / "op_host_table.h").read_text()
    assert f'#include "../../infer_shape/{op}.h"' in table
    definition = table[table.index(f"\nstruct {OP_SPECS[op].op_type}Def {{"):]
    assert f"mgo::infer::{op}(" in definition[:definition.index("\n};")]


HOST_NAME = re.compile(r'static constexpr const char\* kOpType = "(\w+)";')
HOST_OPTIONAL = re.compile(r"static constexpr std::array<bool, (\d+)> kOptional\{([^}]*)\};")


def host_struct(op: str) -> tuple[str, tuple[bool, ...]]:
    """(kOpType, kOptional) of the table struct the op's adapter reads (infer_shape/op_table.h)."""
    table = (ASCENDC.parent / "infer_shape" / "op_table.h").read_text()
    src = table[table.index(f"\nstruct {OP_SPECS[op].op_type} {{"):]
    src = src[:src.index("\n};")]
    name = HOST_NAME.findall(src)
    (size, flags), = HOST_OPTIONAL.findall(src)
    optional = tuple(f.strip() == "true" for f in flags.split(",")) if flags.strip() else (False,) * int(size)
    assert len(name) == 1 and len(optional) == int(size)
    return name[0], optional


@pytest.mark.parametrize("op", OPS)
def test_op_host_instantiates_the_shared_adapter(driver: Path, op: str) -> None:
    # One adapter for every op: the op source registers the template's instances (through the one
    # OpDef body, common/op_host_def.h) and holds no graph-engine context code of its own (that
    # would be a copy of the adapter).
    src = (ASCENDC / op / "op_host" / f"{op}.cpp").read_text()
    assert f'#include "{op}_def.h"' in src
    src += (ASCENDC / op / "op_host" / f"{op}_def.h").read_text()
    spec, d = OP_SPECS[op], opdef(driver, op)
    name, optional = host_struct(op)
    assert '#include "../../common/op_host_adapter.h"' in src
    assert f"struct {spec.op_type}Host : {spec.op_type}Def {{" in src
    assert f"mgo::op_host::DefineOp<mgo::op_host::{spec.op_type}Host>(*this)" in src
    define = (ASCENDC / "common" / "op_host_def.h").read_text()
    for adapter in ("InferShape", "InferDataType", "Tiling"):
        assert f"({adapter}<Op>)" in define
    assert "Context" not in src, "context handling belongs in common/op_host_adapter.h"
    assert name == spec.op_type
    # OPTIONAL in the OpDef exactly for the spec's optional inputs, and the adapter reads them so.
    assert d["input_params"] == tuple("OPTIONAL" if i in spec.optional else "REQUIRED" for i in spec.inputs)
    assert tuple("OPTIONAL" if o else "REQUIRED" for o in optional) == d["input_params"]
    assert set(d["output_params"]) == {"REQUIRED"}


ATTR_FIELD = re.compile(r"&Attrs::(\w+)")
FIELD_TYPES = {"int64_t": "int", "double": "float", "std::string": "str", "bool": "bool"}


@pytest.mark.parametrize("op", OPS)
def test_op_host_reads_attributes_in_opdef_order(op: str) -> None:
    # ReadAttrs<Op> (common/op_host_adapter.h) reads attribute i, named kAttrNames[i], into the
    # Table::Attrs field Table::kAttrs[i] (infer_shape/op_table.h, the struct op_attrs.h) with the
    # reader of that field's raw C++ type (a choice enum's Raw, op_table.h's Choice<E>).
    root = ASCENDC.parent / "infer_shape"
    table, attrs = (root / "op_table.h").read_text(), (root / "op_attrs.h").read_text()
    raw = dict(re.findall(r"struct Choice<(\w+)> \{\n  using Raw = ([\w:]+);", table))
    table = table[table.index(f"\nstruct {OP_SPECS[op].op_type} {{"):]
    table = table[:table.index("\n};")]
    struct = attrs[attrs.index(f"\nstruct {OP_SPECS[op].op_type}Attrs {{"):]
    struct = struct[:struct.index("};")]
    fields = ATTR_FIELD.findall(re.search(r"kAttrs = std::[\w<>]+\(([^;]*)\);", table).group(1))
    types = {name: FIELD_TYPES[raw.get(t, t)] for t, name in re.findall(r"^  ([\w:]+) (\w+);", struct, flags=re.M)}
    names = re.findall(r'"(\w+)"', re.search(r"kAttrNames\{([^}]*)\}", table).group(1))
    reads = [(i, names[i], types[field]) for i, field in enumerate(fields) if field == names[i]]
    assert len(fields) == len(names) == len(reads)
    assert reads == [(i, a.name, a.type) for i, a in enumerate(OP_SPECS[op].attrs)]


# ---------------------------------------------------------------- the adapters, run
# tests/ascend/cann_stub declares the documented CANN op_host API subset the sources use (not CANN
# itself). Compiled against it, the real op_host sources run: their infer adapters must agree with
# the pybind11 rules (the same infer_shape/ headers), and their tiling adapters must hand the
# pure tiling the shapes and attributes of the inputs.
GE_CODES = {"float16": 1, "bfloat16": 27, "float32": 0, "int32": 3, "int64": 9}
GE_NAMES = {code: name for name, code in GE_CODES.items()}
ATTR_KINDS = {"str": "s", "int": "i", "float": "f", "bool": "b"}
SYS_WORKSPACE = 16 * 1024 * 1024  # what the stub platform reports


CANN_ENV = ("CANN_METADEF", "CANN_RUNTIME", "ASC_DEVKIT", "LIBBOUNDSCHECK")
NO_CANN = ("the real-library driver needs checkouts of hicann/metadef, hicann/runtime, mirror-cann/asc-devkit and "
           "openeuler-mirror/libboundscheck (CANN_METADEF, CANN_RUNTIME, ASC_DEVKIT, LIBBOUNDSCHECK) and protobuf "
           "(libprotobuf-dev, protobuf-compiler); CI has none")


def host_check() -> ModuleType:
    """scripts/check_ascend_host.py, which builds the real-library driver."""
    spec = importlib.util.spec_from_file_location("check_ascend_host", SCRIPTS / "check_ascend_host.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's annotations through it
    spec.loader.exec_module(module)
    return module


def stand_in_driver(out: Path) -> Path:
    cxx = shutil.which("g++")
    assert cxx, "g++ is required"
    stub = Path(__file__).resolve().parent / "cann_stub"
    unit = out / "driver.cpp"  # every op_host source in one program, as CANN links them
    unit.write_text("".join(f'#include "{ASCENDC / op / "op_host" / op}.cpp"\n' for op in OPS)
                    + f'#include "{stub / "op_host_driver.cpp"}"\n')
    result = subprocess.run([cxx, "-std=c++17", "-O0", "-Wall", "-Wextra", "-Werror", f"-I{stub}", str(unit), "-o",
                             str(out / "driver")], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return out / "driver"


def real_driver() -> Path:
    """The driver on CANN's real libraries (built by the script; its libraries cached)."""
    if not all(os.environ.get(v) for v in CANN_ENV) or shutil.which("protoc") is None:
        pytest.skip(NO_CANN)
    hc = host_check()
    sources = hc.Sources(*(Path(os.environ[v]).resolve() for v in CANN_ENV))
    build = Path(os.environ.get("MGO_HOST_CHECK_DIR") or hc.default_build_dir())
    return hc.build_driver(sources, build)


@pytest.fixture(scope="module", params=["stand-in", "CANN"])
def driver(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The op_host sources built against the stand-in, or on CANN's real host libraries."""
    return stand_in_driver(tmp_path_factory.mktemp("op_host")) if request.param == "stand-in" else real_driver()


def is_real(driver: Path) -> bool:
    return driver.parent.name == "bin"  # check_ascend_host.py's <build>/bin/driver


def ours(stderr: str) -> str:
    """What the op_host logged: the real libraries' own error lines ([CANN] ...) left out."""
    return "\n".join(ln for ln in stderr.splitlines() if not ln.startswith("[CANN]")).strip()


def run_driver(driver: Path, stdin: str, **env: str) -> tuple[str, str]:
    result = subprocess.run([str(driver)], input=stdin, capture_output=True, text=True, timeout=60, check=True,
                            env={**os.environ, **env})
    return result.stdout.strip(), ours(result.stderr)


Input = tuple[list[int], str] | None  # (shape, dtype), None = omitted OPTIONAL input


def case_words(op: str, step: str, inputs: list[Input], attrs: dict[str, object]) -> str:
    spec = OP_SPECS[op]
    words = [spec.op_type, step, str(len(spec.attrs))]
    for i, a in enumerate(spec.attrs):
        value = attrs[a.name]
        words += [str(i), ATTR_KINDS[a.type], str(int(value)) if a.type == "bool" else str(value)]
    words.append(str(len(inputs)))
    for x in inputs:
        shape, dtype = x if x is not None else ([0], "float16")
        words += ["0" if x is None else "1", str(GE_CODES[dtype]), str(len(shape)), *map(str, shape)]
    return " ".join(words)


def run_adapter(driver: Path, op: str, step: str, inputs: list[Input], attrs: dict[str, object],
                **env: str) -> tuple[str, str]:
    return run_driver(driver, case_words(op, step, inputs, attrs), **env)


def rules(op: str, inputs: list[Input], attrs: dict[str, object]) -> tuple[list, list]:
    """The pybind11 rules on the same inputs, an omitted one being the Python placeholder."""
    from ms_grad_ops import _validate

    # The placeholder has its slot's dtype: int32 for lengths, float32 for sinks, query's for the other float inputs.
    ints = ("actual_seq_lengths", "cu_seqlens", "seqused", "cmp_residual_kv", "ori_sparse", "cmp_sparse")
    slot = {name: "int32" if name.startswith(ints) else "float32" if name == "sinks" else inputs[0][1]
            for name in OP_SPECS[op].inputs}
    shapes = [x[0] if x is not None else [0] for x in inputs]
    dtypes = [x[1] if x is not None else slot[name] for x, name in zip(inputs, OP_SPECS[op].inputs)]
    return getattr(_validate, op)(shapes, dtypes, *(attrs[a.name] for a in OP_SPECS[op].attrs))


def adapter_infer(driver: Path, op: str, inputs: list[Input], attrs: dict[str, object]) -> tuple[list, list]:
    out, err = run_adapter(driver, op, "shape", inputs, attrs)
    assert out.startswith("ok "), err
    words = list(map(int, out.split()[1:]))
    shapes = []
    pos = 1
    for _ in range(words[0]):
        shapes.append(words[pos + 1:pos + 1 + words[pos]])
        pos += 1 + words[pos]
    # InferDataType gets dtypes only, as in CANN (shapes unknown).
    out, err = run_adapter(driver, op, "dtype", [None if x is None else ([-2], x[1]) for x in inputs], attrs)
    assert out.startswith("ok "), err
    return shapes, [GE_NAMES[int(c)] for c in out.split()[2:]]


def _number_or_name(v: str) -> float | str:
    try:
        return float(v)
    except ValueError:
        return v  # a choice's name


def tiling(driver: Path, op: str, inputs: list[Input], attrs: dict[str, object]) -> dict[str, float | str]:
    out, err = run_adapter(driver, op, "tiling", inputs, attrs)
    assert out.startswith("ok "), err
    return {k: _number_or_name(v) for k, v in (w.split("=") for w in out.split()[1:])}


def defaults(op: str, **changes: object) -> dict[str, object]:
    """The table's defaults (0.5 for a required attribute: scale_value), then ``changes``."""
    return {**{a.name: 0.5 if a.required else a.default for a in OP_SPECS[op].attrs}, **changes}


def carried(t: dict[str, float | str], attrs: dict[str, object]) -> dict[str, object]:
    """The attributes the tiling data carries for the kernel (attr.<name>), as given."""
    return {name: t[f"attr.{name}"] for name in attrs}


def as_printed(attrs: dict[str, object]) -> dict[str, object]:
    """``attrs`` as the driver prints them: numbers as floats, a bool as 0/1, a choice by its name."""
    return {k: v if isinstance(v, str) else float(v) for k, v in attrs.items()}


def sfa_inputs(op: str, layout: str, dtype: str, *, rope: bool, lengths: bool, value: bool = True,
               omit: bool = True, lens_dtype: str = "int32", sinks: bool = False) -> list[Input]:
    """Inputs of the SFA ops: B = 2, S1 = 5, S2 = 7 (TND: T1 = 10, T2 = 14), N1 = 4, N2 = 2,
    D = 32, Dr = 16, K = 3, sinks [4] float32 or absent. `omit`: absent inputs omitted (CANN)
    rather than placeholders."""
    lead_q, lead_k = ([2, 5], [2, 7]) if layout == "BSND" else ([10], [14])
    q, k = ([*lead_q, 4, 32], dtype), ([*lead_k, 2, 32], dtype)
    absent: Input = None if omit else ([0], dtype)
    qr, kr = (([*lead_q, 4, 16], dtype), ([*lead_k, 2, 16], dtype)) if rope else (absent, absent)
    lq, lkv = (([2], lens_dtype), ([2], lens_dtype)) if lengths else (None if omit else ([0], "int32"),) * 2
    idx = ([*lead_q, 2, 3], "int32")
    v = k if value else absent
    sk = sinks_input(sinks, omit)
    if op == "sparse_flash_attention":
        return [q, k, v, idx, qr, kr, lq, lkv, sk]
    stats = ([2, 2, 5, 2] if layout == "BSND" else [2, 10, 2], "float32")
    return [q, k, v, idx, q, q, stats, stats, lq, lkv, qr, kr, sk]


def sinks_input(present: bool, omit: bool) -> Input:
    """sinks of N1 = 4 heads, or absent: omitted, or the float32 placeholder."""
    return ([4], "float32") if present else None if omit else ([0], "float32")


def smla_inputs(layout: str, kind: str, omit: bool = True) -> list[Input]:
    """Inputs of sparse_flash_mla: D 512, N1 4, N2 1; TND two sequences (T1 9, T2 40, cu_seqlens [3]), BSND B 2,
    S1 5, S2 20 with seqused_*; kind "swa" (no cmp_kv), "hca" (cmp_kv, residual, sinks) or "csa" (K 512 slots)."""
    bsnd = layout == "BSND"
    lead_q, lead_o, lead_c = ([2, 5], [2, 20], [2, 5]) if bsnd else ([9], [40], [10])
    absent: Input = None if omit else ([0], "int32")
    cmp = ([*lead_c, 1, 512], "bfloat16") if kind != "swa" else None if omit else ([0], "bfloat16")
    idx = ([*lead_q, 1, 512], "int32") if kind == "csa" else absent
    cu = ([3], "int32") if not bsnd else absent
    used = ([2], "int32") if bsnd else absent
    res = ([2], "int32") if kind != "swa" else absent
    sinks = ([4], "float32") if kind == "hca" else None if omit else ([0], "float32")
    return [([*lead_q, 4, 512], "bfloat16"), ([*lead_o, 1, 512], "bfloat16"), cmp, absent, idx, cu,
            cu, cu if kind != "swa" else absent, used, used,
            used if kind != "swa" else absent, res, sinks]


SMLA_CASES = [("TND", "csa"), ("TND", "swa"), ("BSND", "hca"), ("BSND", "csa")]


SFA_OPS = ("sparse_flash_attention", "sparse_flash_attention_grad")
SFA_CASES = [("TND", True, True), ("TND", False, True), ("TND", True, False), ("BSND", True, False),
             ("BSND", False, False)]


def adapter_cases() -> list[tuple[str, list[Input], dict[str, object]]]:
    cases = [("rope", [([6, 256], "float16")] * 2 + [([16, 128], "float16")] * 2 + [([2], "int32")], defaults("rope")),
             ("rope_grad", [([6, 384], "bfloat16")] * 2 + [([9, 128], "bfloat16")] * 2 + [([3], "int32")],
              defaults("rope_grad", mode="vjp")),
             ("cla_gate_merge", [([5, 3, 128], "float16")] * 2 + [([5, 3], "float16")] * 2, defaults("cla_gate_merge")),
             ("cla_gate_backward", [([5, 3, 128], "bfloat16")] * 3 + [([5, 3], "bfloat16")] * 2,
              defaults("cla_gate_backward"))]
    for op in SFA_OPS:
        for (layout, rope, lengths), sinks in zip(SFA_CASES, (False, True, False, True, False)):
            cases.append((op, sfa_inputs(op, layout, "bfloat16", rope=rope, lengths=lengths, sinks=sinks),
                          defaults(op, layout=layout, scale_value=0.125, sparse_block_size=2, sparse_mode=0)))
    for layout, kind in SMLA_CASES:
        cases.append(("sparse_flash_mla", smla_inputs(layout, kind),
                      defaults("sparse_flash_mla", layout=layout, cmp_ratio=4 if kind != "swa" else 1)))
    for layout, kind, sinks in (("TND", "csa", True), ("BSND", "hca", False), ("TND", "swa", False)):
        cases.append(("sparse_flash_mla_grad", smla_grad_inputs(layout, "bfloat16", kind, sinks=sinks),
                      defaults("sparse_flash_mla_grad", layout=layout, softmax_scale=0.05,
                               cmp_ratio={"csa": 4, "hca": 128, "swa": 1}[kind])))
    return cases


def smla_grad_inputs(layout: str, dtype: str, kind: str, *, sinks: bool) -> list[Input]:
    """Inputs of sparse_flash_mla_grad at the Ascend limits (D 512, N2 1, K 512): B = 2, S1 = 5, S2 = 140 (TND:
    T1 = 10, T2 = 280, cumulative lengths with the leading 0), S3 = 35 (CSA) or 1 (HCA), N1 = 4; "swa" without
    cmp_kv. Absent inputs omitted."""
    lead_q, lead_o = ([2, 5], [2, 140]) if layout == "BSND" else ([10], [280])
    s3 = {"csa": 35, "hca": 1, "swa": 0}[kind]
    q = ([*lead_q, 4, 512], dtype)
    lse = ([2, 1, 5, 4] if layout == "BSND" else [1, 10, 4], "float32")
    cmp = None if kind == "swa" else ([2, s3, 1, 512] if layout == "BSND" else [2 * s3, 1, 512], dtype)
    idx = ([*lead_q, 1, 512], "int32") if kind == "csa" else None
    cu = ([3], "int32") if layout == "TND" else None
    residual = None if kind == "swa" else ([2], "int32")
    return [q, q, q, lse, ([*lead_o, 1, 512], dtype), cmp, None, idx, cu, cu, cu if cmp else None, None, None,
            None, residual, ([4], "float32") if sinks else None]


@pytest.mark.parametrize("case", adapter_cases(), ids=lambda c: c[0])
def test_infer_adapters_agree_with_the_rules(driver: Path, case: tuple) -> None:
    op, inputs, attrs = case
    assert adapter_infer(driver, op, inputs, attrs) == tuple(rules(op, inputs, attrs))


@pytest.mark.parametrize("op", SFA_OPS)
def test_infer_adapters_pass_unknown_dims_through(driver: Path, op: str) -> None:
    # GRAPH compile with dynamic shapes: -1 dims and -2 (unknown rank) reach the rules unchanged.
    inputs = sfa_inputs(op, "TND", "float16", rope=True, lengths=True)
    inputs[0] = ([-1, 4, 32], "float16")
    inputs[3] = ([-2], "int32")
    attrs = defaults(op, layout="TND")
    assert adapter_infer(driver, op, inputs, attrs) == tuple(rules(op, inputs, attrs))


@pytest.mark.parametrize("op", SFA_OPS)
def test_omitted_optional_inputs_are_the_placeholder(driver: Path, op: str) -> None:
    # CANN omits an absent OPTIONAL input; the Python layer passes a zero-size placeholder. The
    # adapter must give both the same outputs, dtypes included (an absent input's gradient is
    # empty, in query's dtype).
    attrs = defaults(op, layout="TND")
    omitted = adapter_infer(driver, op, sfa_inputs(op, "TND", "bfloat16", rope=False, lengths=False, value=False),
                            attrs)
    placeholder = sfa_inputs(op, "TND", "bfloat16", rope=False, lengths=False, value=False, omit=False)
    assert omitted[0] == adapter_infer(driver, op, placeholder, attrs)[0] == rules(op, placeholder, attrs)[0]
    assert omitted[1] == rules(op, placeholder, attrs)[1]


@pytest.mark.parametrize("op", SFA_OPS)
def test_infer_adapter_errors_are_the_rules_errors(driver: Path, op: str) -> None:
    inputs = sfa_inputs(op, "TND", "float16", rope=True, lengths=True)
    inputs[1] = ([14, 3, 32], "float16")  # N1 = 4 is not a multiple of N2 = 3
    attrs = defaults(op, layout="TND")
    with pytest.raises(ValueError) as raised:
        rules(op, inputs, attrs)
    out, err = run_adapter(driver, op, "shape", inputs, attrs)
    assert out == "failed"
    assert err == f"[ms_grad_ops] {OP_SPECS[op].op_type}: {raised.value}"


@pytest.mark.parametrize("op", SFA_OPS)
@pytest.mark.parametrize("layout, rope, lengths", SFA_CASES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_sfa_tiling_adapter_passes_the_inputs(driver: Path, op: str, layout: str, rope: bool, lengths: bool,
                                               dtype: str) -> None:
    grad = op.endswith("_grad")
    attrs = defaults(op, layout=layout, scale_value=0.125, sparse_block_size=2, sparse_mode=0,
                     **({"deterministic": True} if grad else {}))
    t = tiling(driver, op, sfa_inputs(op, layout, dtype, rope=rope, lengths=lengths), attrs)
    # TND without lengths is one sequence: the pure tiling lays it out as BSND with B = 1.
    as_bsnd = layout == "BSND" or not lengths
    batch, s1, s2 = (2, 5, 7) if layout == "BSND" else (1, 10, 14) if not lengths else (2, 0, 0)
    expected = {"layout": 0 if as_bsnd else 1, "batch": batch, "s1": s1, "s2": s2, "t1": 10, "t2": 14, "n1": 4,
                "n2": 2, "d": 32, "dr": 16 if rope else 0, "has_rope": int(rope), "k": 3, "block_size": 2,
                "sparse_mode": 0, "scale": 0.125, "has_value": 1, "seq_lens_int64": 0}
    assert {key: t[key] for key in expected} == expected
    assert carried(t, attrs) == as_printed(attrs), "the tiling data carries every attribute for the kernel"
    assert t["tiling_key"] == {"float16": 0, "bfloat16": 1}[dtype]
    assert t["block_dim"] == t["used_aic"] >= 1
    assert t["workspace"] == SYS_WORKSPACE + t["user_workspace"] and t["user_workspace"] > 0
    assert t["schedule_mode"] == int(grad)  # the grad's SyncAll needs every core started at once


@pytest.mark.parametrize("op", SFA_OPS)
@pytest.mark.parametrize("omit", [True, False])
def test_sfa_tiling_adapter_value_absent_and_int64_lengths(driver: Path, op: str, omit: bool) -> None:
    # value=None (key is value) and int64 lengths are tiling fields the kernels read; an omitted
    # input and the placeholder tile alike.
    attrs = defaults(op, layout="TND")
    inputs = sfa_inputs(op, "TND", "bfloat16", rope=True, lengths=True, value=False, omit=omit, lens_dtype="int64")
    t = tiling(driver, op, inputs, attrs)
    assert (t["has_value"], t["seq_lens_int64"], t["layout"], t["batch"]) == (0, 1, 1, 2)


@pytest.mark.parametrize("op", SFA_OPS)
@pytest.mark.parametrize("omit", [True, False])
def test_sfa_tiling_adapter_reads_sinks(driver: Path, op: str, omit: bool) -> None:
    # sinks present: a tiling field the kernels read, and the grad's workspace grows by its
    # [T1, N1] float32 sink terms (T1 = 10, N1 = 4: one 512-byte piece); absent (omitted or the
    # placeholder): the tiling of no sinks.
    attrs = defaults(op, layout="TND")
    plain = tiling(driver, op, sfa_inputs(op, "TND", "float16", rope=True, lengths=True, omit=omit), attrs)
    sunk = tiling(driver, op, sfa_inputs(op, "TND", "float16", rope=True, lengths=True, omit=omit, sinks=True), attrs)
    assert (plain["has_sinks"], sunk["has_sinks"]) == (0, 1)
    grown = 512 if op.endswith("_grad") else 0
    assert sunk["user_workspace"] == plain["user_workspace"] + grown
    assert {k: v for k, v in sunk.items() if k not in ("has_sinks", "user_workspace", "workspace")} == \
        {k: v for k, v in plain.items() if k not in ("has_sinks", "user_workspace", "workspace")}


@pytest.mark.parametrize("op", SFA_OPS)
def test_sfa_tiling_adapter_refuses_other_dtypes(driver: Path, op: str) -> None:
    inputs = sfa_inputs(op, "TND", "float32", rope=True, lengths=True)
    out, err = run_adapter(driver, op, "tiling", inputs, defaults(op, layout="TND"))
    assert out == "failed" and err.endswith("the kernel takes float16 or bfloat16 inputs only")


@pytest.mark.parametrize("omit", [True, False])
@pytest.mark.parametrize(("layout", "kind"), SMLA_CASES)
def test_smla_tiling_adapter_reads_the_shapes(driver: Path, layout: str, kind: str, omit: bool) -> None:
    # The geometry the kernel reads (smla_tiling_common.h SmlaGeo) from the inputs of either layout; an omitted
    # optional input and the placeholder tile alike; the attributes carried as given.
    attrs = defaults("sparse_flash_mla", layout=layout, cmp_ratio=4 if kind != "swa" else 1)
    t = tiling(driver, "sparse_flash_mla", smla_inputs(layout, kind, omit), attrs)
    bsnd, cmp = layout == "BSND", kind != "swa"
    want = {"layout": 0 if bsnd else 1, "batch": 2, "t1": 10 if bsnd else 9, "t2": 40, "t3": 10 if cmp else 0,
            "n1": 4, "n2": 1, "d": 512, "k_ori": 0, "k_cmp": 512 if kind == "csa" else 0, "has_cmp": int(cmp),
            "has_sinks": int(kind == "hca")}
    # bit i: the i-th length input (cu_seqlens_q/ori_kv/cmp_kv, seqused_q/ori_kv/cmp_kv, cmp_residual_kv)
    lens = (0b0001000 | 0b0010000 | (0b0100000 if cmp else 0)) if bsnd else (0b0000011 | (0b0000100 if cmp else 0))
    want["len_mask"] = lens | (0b1000000 if cmp else 0)
    assert {k: t[k] for k in want} == want
    assert carried(t, attrs) == as_printed(attrs)


def test_smla_tiling_adapter_refuses_sizes_outside_the_ascend_limits(driver: Path) -> None:
    inputs = smla_inputs("TND", "csa")
    inputs[4] = ([9, 1, 256], "int32")
    out, err = run_adapter(driver, "sparse_flash_mla", "tiling", inputs, defaults("sparse_flash_mla", layout="TND",
                                                                                   cmp_ratio=4))
    assert out == "failed" and "K (slots of cmp_sparse_indices (512 or 1024), its last dim) must be in [512, 1024] " \
        "on Ascend" in err


def sli_inputs(layout: str, dtype: str, wdtype: str, *, rope: bool, lengths: bool, omit: bool = True,
               sinks: bool = False) -> list[Input]:
    """Inputs of sparse_lightning_indexer_grad_kl_loss: B = 2, S1 = 5, S2 = 7 (TND: T1 = 10,
    T2 = 14), N1 = 4, D = 32, Dr = 16, Nidx = 2, Didx = 16, K = 3, sinks [4] float32 or absent."""
    lead_q, lead_k = ([2, 5], [2, 7]) if layout == "BSND" else ([10], [14])
    absent: Input = None if omit else ([0], dtype)
    qr, kr = (([*lead_q, 4, 16], dtype), ([*lead_k, 1, 16], dtype)) if rope else (absent, absent)
    lq, lk = (([2], "int32"), ([2], "int32")) if lengths else (None if omit else ([0], "int32"),) * 2
    stats = ([2, 1, 5, 4] if layout == "BSND" else [1, 10, 4], "float32")
    return [([*lead_q, 4, 32], dtype), ([*lead_k, 1, 32], dtype), ([*lead_q, 2, 16], dtype),
            ([*lead_k, 1, 16], dtype), ([*lead_q, 2], wdtype), ([*lead_q, 1, 3], "int32"), stats, stats, qr, kr, lq,
            lk, sinks_input(sinks, omit), None if omit else ([0], "int32")]


SLI = "sparse_lightning_indexer_grad_kl_loss"


def test_sli_reads_the_residual_above_ratio_1(driver: Path) -> None:
    """Compressed keys (docs/contract.md section 9.1): a given cmp_residual_k is read by the kernel at
    cmp_ratio > 1 only; the zero-size placeholder is absent (every residual 0)."""
    given = [*sli_inputs("TND", "bfloat16", "float32", rope=True, lengths=True)[:-1], ([2], "int32")]
    placeheld = sli_inputs("TND", "bfloat16", "float32", rope=True, lengths=True, omit=False)
    for ratio, inputs, want in ((4, given, 1), (1, given, 0), (128, placeheld, 0)):
        t = tiling(driver, SLI, inputs, defaults(SLI, layout="TND", cmp_ratio=ratio))
        assert (t["cmp_residual"], t["attr.cmp_ratio"]) == (want, ratio)


@pytest.mark.parametrize("layout, rope, lengths", SFA_CASES)
@pytest.mark.parametrize("dtype, wdtype", [("float16", "float16"), ("bfloat16", "float32")])
def test_sli_adapters_pass_the_inputs(driver: Path, layout: str, rope: bool, lengths: bool, dtype: str,
                                      wdtype: str) -> None:
    attrs = defaults(SLI, layout=layout, scale_value=0.25, sparse_mode=0, deterministic=True)
    inputs = sli_inputs(layout, dtype, wdtype, rope=rope, lengths=lengths)
    assert adapter_infer(driver, SLI, inputs, attrs) == rules(SLI, inputs, attrs)
    t = tiling(driver, SLI, inputs, attrs)
    as_bsnd = layout == "BSND" or not lengths  # TND without lengths: one sequence, BSND with B = 1
    batch, s1, s2 = (2, 5, 7) if layout == "BSND" else (1, 10, 14) if not lengths else (2, 0, 0)
    expected = {"layout": 0 if as_bsnd else 1, "batch": batch, "s1": s1, "s2": s2, "t1": 10, "t2": 14, "n1": 4,
                "d": 32, "dr": 16 if rope else 0, "has_rope": int(rope), "n_idx": 2, "d_idx": 16, "k": 3,
                "sparse_mode": 0, "scale": 0.25}
    assert {key: t[key] for key in expected} == expected
    assert carried(t, attrs) == as_printed(attrs), "the tiling data carries every attribute for the kernel"
    assert t["tiling_key"] == {"float16": 0, "bfloat16": 1}[dtype] + (10 if wdtype == "float32" else 0)
    assert t["block_dim"] == t["used_aic"] >= 1
    assert t["workspace"] == SYS_WORKSPACE + t["user_workspace"] and t["user_workspace"] > 0
    assert t["schedule_mode"] == 1  # SyncAll between the passes needs every core started at once
    placeheld = sli_inputs(layout, dtype, wdtype, rope=rope, lengths=lengths, omit=False)
    assert tiling(driver, SLI, placeheld, attrs) == t, "an omitted input and the placeholder tile alike"


@pytest.mark.parametrize("omit", [True, False])
def test_sli_adapters_read_sinks(driver: Path, omit: bool) -> None:
    attrs = defaults(SLI, layout="TND")
    plain = tiling(driver, SLI, sli_inputs("TND", "bfloat16", "float32", rope=True, lengths=True, omit=omit), attrs)
    inputs = sli_inputs("TND", "bfloat16", "float32", rope=True, lengths=True, omit=omit, sinks=True)
    assert adapter_infer(driver, SLI, inputs, attrs) == rules(SLI, inputs, attrs)
    sunk = tiling(driver, SLI, inputs, attrs)
    assert (plain["has_sinks"], sunk["has_sinks"]) == (0, 1)
    assert {k: v for k, v in sunk.items() if k != "has_sinks"} == {k: v for k, v in plain.items() if k != "has_sinks"}


def test_sli_tiling_adapter_refuses_other_dtypes(driver: Path) -> None:
    out, err = run_adapter(driver, SLI, "tiling", sli_inputs("TND", "float32", "float32", rope=True, lengths=True),
                           defaults(SLI, layout="TND"))
    assert out == "failed" and err.endswith("the kernel takes float16 or bfloat16 inputs only")


@pytest.mark.parametrize("layout, lengths", [("TND", True), ("TND", False), ("BSND", False)])
@pytest.mark.parametrize("dtype, wdtype", [("float16", "float16"), ("bfloat16", "float32")])
def test_lightning_indexer_adapters_pass_the_inputs(driver: Path, layout: str, lengths: bool, dtype: str,
                                                    wdtype: str) -> None:
    lead_q, lead_k = ([2, 5], [2, 7]) if layout == "BSND" else ([10], [14])
    lens: list[Input] = [([2], "int32"), ([2], "int32")] if lengths else [None, None]
    # cmp_residual_k (compressed keys, docs/contract.md section 9.1): given with the lengths (one per
    # batch) and cmp_ratio 4, so the kernel reads it; omitted otherwise (ratio 1).
    residual: Input = ([2], "int32") if lengths else None
    inputs: list[Input] = [([*lead_q, 2, 16], dtype), ([*lead_k, 1, 16], dtype), ([*lead_q, 2], wdtype), *lens,
                           residual]
    attrs = defaults("lightning_indexer", sparse_count=6, layout=layout, sparse_mode=0, cmp_ratio=4 if lengths else 1)
    assert adapter_infer(driver, "lightning_indexer", inputs, attrs) == rules("lightning_indexer", inputs, attrs)
    t = tiling(driver, "lightning_indexer", inputs, attrs)
    as_bsnd = layout == "BSND" or not lengths
    batch, s1, s2 = (2, 5, 7) if layout == "BSND" else (1, 10, 14) if not lengths else (2, 0, 0)
    expected = {"layout": 0 if as_bsnd else 1, "batch": batch, "s1": s1, "s2": s2, "t1": 10, "t2": 14, "n_idx": 2,
                "d_idx": 16, "k": 6, "sparse_mode": 0, "cmp_residual": int(lengths)}
    assert {key: t[key] for key in expected} == expected
    assert t["attr.cmp_ratio"] == (4 if lengths else 1)
    assert t["tiling_key"] == {"float16": 0, "bfloat16": 1}[dtype] + (10 if wdtype == "float32" else 0)
    assert t["block_dim"] == t["used_aic"] >= 1 and t["schedule_mode"] == 0
    assert t["workspace"] == SYS_WORKSPACE + t["user_workspace"] and t["user_workspace"] > 0


LIG = "lightning_indexer_grad"


def lig_inputs(layout: str, dtype: str, wdtype: str, *, lengths: bool, omit: bool = True) -> list[Input]:
    """Inputs of lightning_indexer_grad: B = 2, S1 = 5, S2 = 7 (TND: T1 = 10, T2 = 14), Nidx = 2,
    Didx = 16, K = 3."""
    lead_q, lead_k = ([2, 5], [2, 7]) if layout == "BSND" else ([10], [14])
    lens: list[Input] = [([2], "int32"), ([2], "int32")] if lengths else [None if omit else ([0], "int32")] * 2
    return [([*lead_q, 2, 16], dtype), ([*lead_k, 1, 16], dtype), ([*lead_q, 2], wdtype),
            ([*lead_q, 1, 3], "int32"), ([*lead_q, 1, 3], "float32"), *lens, None if omit else ([0], "int32")]


@pytest.mark.parametrize("layout, lengths", [("TND", True), ("TND", False), ("BSND", False)])
@pytest.mark.parametrize("dtype, wdtype", [("float16", "float16"), ("bfloat16", "float32")])
def test_lightning_indexer_grad_adapters_pass_the_inputs(driver: Path, layout: str, lengths: bool, dtype: str,
                                                         wdtype: str) -> None:
    inputs = lig_inputs(layout, dtype, wdtype, lengths=lengths)
    attrs = defaults(LIG, layout=layout, sparse_mode=0)
    assert adapter_infer(driver, LIG, inputs, attrs) == rules(LIG, inputs, attrs)
    t = tiling(driver, LIG, inputs, attrs)
    as_bsnd = layout == "BSND" or not lengths
    batch, s1, s2 = (2, 5, 7) if layout == "BSND" else (1, 10, 14) if not lengths else (2, 0, 0)
    expected = {"layout": 0 if as_bsnd else 1, "batch": batch, "s1": s1, "s2": s2, "t1": 10, "t2": 14, "n_idx": 2,
                "d_idx": 16, "k": 3, "sparse_mode": 0}
    assert {key: t[key] for key in expected} == expected
    assert t["tiling_key"] == {"float16": 0, "bfloat16": 1}[dtype] + (10 if wdtype == "float32" else 0)
    assert t["block_dim"] == t["used_aic"] >= 1
    assert t["schedule_mode"] == 0, "no SyncAll: the cores need not start together"
    assert t["workspace"] == SYS_WORKSPACE + t["user_workspace"] and t["user_workspace"] > 0
    placeheld = lig_inputs(layout, dtype, wdtype, lengths=lengths, omit=False)
    assert tiling(driver, LIG, placeheld, attrs) == t, "an omitted input and the placeholder tile alike"


def test_lightning_indexer_grad_reads_the_residual_above_ratio_1(driver: Path) -> None:
    """Compressed keys (docs/contract.md section 9.1): a given cmp_residual_k is read by the kernel at
    cmp_ratio > 1 only; the zero-size placeholder is absent (every residual 0)."""
    given = [*lig_inputs("TND", "bfloat16", "float32", lengths=True)[:-1], ([2], "int32")]
    placeheld = lig_inputs("TND", "bfloat16", "float32", lengths=True, omit=False)
    for ratio, inputs, want in ((4, given, 1), (1, given, 0), (4, placeheld, 0)):
        t = tiling(driver, LIG, inputs, defaults(LIG, layout="TND", cmp_ratio=ratio))
        assert (t["cmp_residual"], t["attr.cmp_ratio"]) == (want, ratio)


SLKG = "sparse_lightning_indexer_kl_loss_grad"


@pytest.mark.parametrize("layout, lengths", [("TND", True), ("TND", False), ("BSND", False)])
@pytest.mark.parametrize("dtype, wdtype", [("float16", "float32"), ("bfloat16", "bfloat16")])
def test_sparse_lightning_indexer_kl_loss_grad_adapters_pass_the_inputs(driver: Path, layout: str, lengths: bool,
                                                                        dtype: str, wdtype: str) -> None:
    """lightning_indexer_grad's inputs with the target attn_softmax_l1_norm in d_values' place; the key pass waits
    for every core's row pass (SyncAll): all cores start together (schedule mode 1). The residual is read at
    cmp_ratio > 1 only."""
    inputs = lig_inputs(layout, dtype, wdtype, lengths=lengths)
    attrs = defaults(SLKG, layout=layout, sparse_mode=3)
    assert adapter_infer(driver, SLKG, inputs, attrs) == rules(SLKG, inputs, attrs)
    t = tiling(driver, SLKG, inputs, attrs)
    as_bsnd = layout == "BSND" or not lengths
    batch, s1, s2 = (2, 5, 7) if layout == "BSND" else (1, 10, 14) if not lengths else (2, 0, 0)
    expected = {"layout": 0 if as_bsnd else 1, "batch": batch, "s1": s1, "s2": s2, "t1": 10, "t2": 14, "n_idx": 2,
                "d_idx": 16, "k": 3, "sparse_mode": 3, "cmp_residual": 0}
    assert {key: t[key] for key in expected} == expected
    assert t["tiling_key"] == {"float16": 0, "bfloat16": 1}[dtype] + (10 if wdtype == "float32" else 0)
    assert t["block_dim"] == t["used_aic"] >= 1
    assert t["schedule_mode"] == 1, "SyncAll: every core must start at once"
    assert t["workspace"] == SYS_WORKSPACE + t["user_workspace"] and t["user_workspace"] > 0
    placeheld = lig_inputs(layout, dtype, wdtype, lengths=lengths, omit=False)
    assert tiling(driver, SLKG, placeheld, attrs) == t, "an omitted input and the placeholder tile alike"
    given = [*inputs[:-1], ([2 if lengths else 1], "int32")]
    for ratio, want in ((4, 1), (1, 0)):
        t = tiling(driver, SLKG, given, defaults(SLKG, layout=layout, cmp_ratio=ratio))
        assert (t["cmp_residual"], t["attr.cmp_ratio"]) == (want, ratio)


def test_sparse_lightning_indexer_kl_loss_grad_tiling_refusal_names_the_op(driver: Path) -> None:
    inputs = lig_inputs("TND", "float16", "float16", lengths=True)
    inputs[0] = ([10, 200, 16], "float16")  # Nidx 200 > 128
    inputs[2] = ([10, 200], "float16")
    out, err = run_adapter(driver, SLKG, "tiling", inputs, defaults(SLKG, layout="TND"))
    assert out == "failed" and "SparseLightningIndexerKLLossGrad" in err and "Nidx" in err


@pytest.mark.parametrize(("step", "slot", "bad", "error"), [("shape", 4, ([10, 1, 4], "float32"), ValueError),
                                                             ("dtype", 4, ([10, 1, 3], "float16"), TypeError)])
def test_lightning_indexer_grad_adapter_errors(driver: Path, step: str, slot: int, bad: Input, error: type) -> None:
    # d_values must have sparse_indices' shape (InferShape) and be float32 (InferDataType, which
    # sees dtypes only): the adapters log the rules' own message.
    inputs = lig_inputs("TND", "float16", "float16", lengths=True)
    inputs[slot] = bad
    attrs = defaults(LIG, layout="TND")
    with pytest.raises(error) as raised:
        rules(LIG, inputs, attrs)
    sent = inputs if step == "shape" else [None if x is None else ([-2], x[1]) for x in inputs]
    out, err = run_adapter(driver, LIG, step, sent, attrs)
    assert out == "failed" and err == f"[ms_grad_ops] LightningIndexerGrad: {raised.value}"


def test_lightning_indexer_grad_tiling_refuses_other_dtypes(driver: Path) -> None:
    attrs = defaults(LIG, layout="TND")
    out, err = run_adapter(driver, LIG, "tiling", lig_inputs("TND", "float32", "float32", lengths=True), attrs)
    assert out == "failed" and err.endswith("the kernel takes float16 or bfloat16 inputs only")


DLI, DLIG = "dense_lightning_indexer_softmax_lse", "dense_lightning_indexer_grad_kl_loss"


def dense_inputs(op: str, layout: str, dtype: str, wdtype: str, *, rope: bool = True, lengths: bool = True,
                 omit: bool = True, n2: int = 1) -> list[Input]:
    """Inputs of the dense pair: B = 2, S1 = 5, S2 = 7 (TND: T1 = 10, T2 = 14), Nidx = 2, Didx = 16;
    the grad's main attention N1 = 4, N2 = n2, D = 32, Dr = 16."""
    lead_q, lead_k = ([2, 5], [2, 7]) if layout == "BSND" else ([10], [14])
    absent: Input = None if omit else ([0], dtype)
    lq, lk = (([2], "int32"), ([2], "int32")) if lengths else (None if omit else ([0], "int32"),) * 2
    index = [([*lead_q, 2, 16], dtype), ([*lead_k, 1, 16], dtype), ([*lead_q, 2], wdtype)]
    residual: Input = None if omit else ([0], "int32")  # cmp_residual_k (unread at cmp_ratio 1)
    if op == DLI:
        return [*index, lq, lk, residual]
    g = 4 // n2
    qr, kr = (([*lead_q, 4, 16], dtype), ([*lead_k, n2, 16], dtype)) if rope else (absent, absent)
    stats = ([2, n2, 5, g] if layout == "BSND" else [n2, 10, g], "float32")
    index_stats = ([2, 1, 5] if layout == "BSND" else [1, 10], "float32")
    return [([*lead_q, 4, 32], dtype), ([*lead_k, n2, 32], dtype), *index, stats, stats, index_stats, index_stats,
            qr, kr, lq, lk, residual]


@pytest.mark.parametrize("op", [DLI, DLIG])
@pytest.mark.parametrize("layout, rope, lengths", SFA_CASES)
@pytest.mark.parametrize("dtype, wdtype", [("float16", "float16"), ("bfloat16", "float32")])
def test_dense_adapters_pass_the_inputs(driver: Path, op: str, layout: str, rope: bool, lengths: bool, dtype: str,
                                        wdtype: str) -> None:
    attrs = defaults(op, layout=layout, **({"scale_value": 0.25, "deterministic": True} if op == DLIG else {}))
    inputs = dense_inputs(op, layout, dtype, wdtype, rope=rope, lengths=lengths)
    assert adapter_infer(driver, op, inputs, attrs) == tuple(rules(op, inputs, attrs))
    t = tiling(driver, op, inputs, attrs)
    as_bsnd = layout == "BSND" or not lengths  # TND without lengths: one sequence, BSND with B = 1
    batch, s1, s2 = (2, 5, 7) if layout == "BSND" else (1, 10, 14) if not lengths else (2, 0, 0)
    expected = {"layout": 0 if as_bsnd else 1, "batch": batch, "s1": s1, "s2": s2, "t1": 10, "t2": 14, "n_idx": 2,
                "d_idx": 16, "sparse_mode": 3}
    if op == DLIG:
        expected |= {"n1": 4, "n2": 1, "d": 32, "dr": 16 if rope else 0, "has_rope": int(rope), "scale": 0.25,
                     "q_group": 1}
    assert {key: t[key] for key in expected} == expected
    assert carried(t, attrs) == as_printed(attrs), "the tiling data carries every attribute for the kernel"
    assert t["tiling_key"] == {"float16": 0, "bfloat16": 1}[dtype] + (10 if wdtype == "float32" else 0)
    assert t["block_dim"] == t["used_aic"] >= 1
    assert t["workspace"] == SYS_WORKSPACE + t["user_workspace"] and t["user_workspace"] > 0
    assert t["schedule_mode"] == int(op == DLIG), "only the grad's SyncAll needs every core started at once"
    placeheld = dense_inputs(op, layout, dtype, wdtype, rope=rope, lengths=lengths, omit=False)
    assert tiling(driver, op, placeheld, attrs) == t, "an omitted input and the placeholder tile alike"


@pytest.mark.parametrize("op", [DLI, DLIG])
@pytest.mark.parametrize("step", ["shape", "dtype", "tiling"])
def test_dense_pair_takes_only_the_causal_mask_on_ascend(driver: Path, op: str, step: str) -> None:
    # CANN's dense kernels take sparse_mode 3 only; the table says so (its Ascend limit), and the
    # op_host refuses 0 from InferShape on in the one wording of every layer.
    inputs = dense_inputs(op, "TND", "float16", "float16")
    sent = inputs if step != "dtype" else [None if x is None else ([-2], x[1]) for x in inputs]
    out, err = run_adapter(driver, op, step, sent, defaults(op, layout="TND", sparse_mode=0))
    assert out == "failed"
    assert err == (f"[ms_grad_ops] {OP_SPECS[op].op_type}: {op}: attribute 'sparse_mode' must be one of "
                   "3 (rightDownCausal) on Ascend, got 0")


@pytest.mark.parametrize("op", [DLI, DLIG])
def test_dense_pair_reads_the_residual_above_ratio_1(driver: Path, op: str) -> None:
    """Compressed keys (docs/contract.md section 9.1): a given cmp_residual_k is read by the kernel at
    cmp_ratio > 1 only; the zero-size placeholder is absent (every residual 0)."""
    given = [*dense_inputs(op, "TND", "bfloat16", "float32")[:-1], ([2], "int32")]
    placeheld = dense_inputs(op, "TND", "bfloat16", "float32", omit=False)
    for ratio, inputs, want in ((4, given, 1), (1, given, 0), (128, placeheld, 0)):
        t = tiling(driver, op, inputs, defaults(op, layout="TND", cmp_ratio=ratio))
        assert (t["cmp_residual"], t["attr.cmp_ratio"]) == (want, ratio)


@pytest.mark.parametrize("layout", ["TND", "BSND"])
def test_dense_grad_tiles_mha(driver: Path, layout: str) -> None:
    # N2 = N1 (CANN's plain MHA main attention) tiles with row-pass groups of 16 query tokens.
    attrs = defaults(DLIG, layout=layout, scale_value=0.25)
    mha = dense_inputs(DLIG, layout, "bfloat16", "float32", n2=4, lengths=layout == "TND")
    assert adapter_infer(driver, DLIG, mha, attrs) == tuple(rules(DLIG, mha, attrs))
    t = tiling(driver, DLIG, mha, attrs)
    assert (t["n1"], t["n2"], t["q_group"], t["t1"], t["t2"], t["scale"]) == (4, 4, 16, 10, 14, 0.25)
    assert t["tiling_key"] == 11 and t["block_dim"] == t["used_aic"] >= 1


@pytest.mark.parametrize("op", [DLI, DLIG])
def test_dense_tiling_refuses_other_dtypes(driver: Path, op: str) -> None:
    out, err = run_adapter(driver, op, "tiling", dense_inputs(op, "TND", "float32", "float32"),
                           defaults(op, layout="TND"))
    assert out == "failed" and err.endswith("the kernel takes float16 or bfloat16 inputs only")


@pytest.mark.parametrize("mode, key", [("atb", 1), ("vjp", 11)])
def test_rope_grad_tiling_adapter_reads_mode(driver: Path, mode: str, key: int) -> None:
    t = tiling(driver, "rope_grad", adapter_cases()[1][1], defaults("rope_grad", mode=mode))
    assert t["tiling_key"] == key  # 10 * mode + dtype (bfloat16 = 1)
    assert (t["tokens"], t["hidden"], t["max_seq_len"], t["batch"]) == (6, 384, 9, 3)
    assert t["block_dim"] == t["used_cores"] == 6 and t["workspace"] == SYS_WORKSPACE


def test_missing_attribute_is_a_clear_failure(driver: Path) -> None:
    spec = OP_SPECS["cla_gate_backward"]
    inputs = adapter_cases()[3][1]
    words = [spec.op_type, "shape", "0", str(len(inputs))]
    for shape, dtype in inputs:
        words += ["1", str(GE_CODES[dtype]), str(len(shape)), *map(str, shape)]
    out, err = run_driver(driver, " ".join(words))
    assert out == "failed"
    assert err == "[ms_grad_ops] ClaGateBackward: attribute 'input_attn_layout' is missing"


LI_INPUTS: list[Input] = [([10, 2, 16], "float16"), ([14, 1, 16], "float16"), ([10, 2], "float16"), None, None, None]


@pytest.mark.parametrize("step", ["shape", "dtype", "tiling"])
@pytest.mark.parametrize(("change", "error"), [
    # an Ascend limit (the table's), refused from InferShape on: the kernel could not take it
    ({"sparse_count": 20000}, "attribute 'sparse_count' must be an integer in [1, 16384] on Ascend, got 20000"),
    # compressed keys (docs/contract.md section 9.1): CANN's range, no narrower Ascend limit
    ({"cmp_ratio": 129}, "attribute 'cmp_ratio' must be an integer in [1, 128], got 129"),
    # a value outside the domain itself, in the one wording of every layer
    ({"sparse_count": 0}, "attribute 'sparse_count' must be an integer in [1, 1048576], got 0"),
    ({"layout": "SBH"}, 'attribute \'layout\' must be one of "BSND", "TND", got "SBH"'),
    ({"sparse_mode": 2}, "attribute 'sparse_mode' must be one of 0 (no mask), 3 (rightDownCausal), got 2"),
])
def test_attribute_domains_are_the_tables(driver: Path, step: str, change: dict, error: str) -> None:
    attrs = defaults("lightning_indexer", **{"layout": "TND", **change})
    inputs = LI_INPUTS if step != "dtype" else [None if x is None else ([-2], x[1]) for x in LI_INPUTS]
    out, err = run_adapter(driver, "lightning_indexer", step, inputs, attrs)
    assert out == "failed" and err == f"[ms_grad_ops] LightningIndexer: lightning_indexer: {error}"


# BSND with per-batch lengths (docs/contract.md section 0.3): either side alone or both. The values stay on
# the device; the tiling carries which sides are given (bsnd_lens: 1 query, 2 key) for the kernels.
LENGTHS_CASES = {
    "sparse_flash_attention": (lambda lq, lk: sfa_inputs("sparse_flash_attention", "BSND", "bfloat16", rope=True,
                                                         lengths=False, omit=False)[:6] + [lq, lk, None],
                               "actual_seq_lengths_kv"),
    "sparse_flash_attention_grad": (lambda lq, lk: sfa_inputs("sparse_flash_attention_grad", "BSND", "bfloat16",
                                                              rope=True, lengths=False, omit=False)[:8]
                                    + [lq, lk] + sfa_inputs("sparse_flash_attention_grad", "BSND", "bfloat16",
                                                            rope=True, lengths=False)[10:], "actual_seq_lengths_kv"),
    "lightning_indexer": (lambda lq, lk: [([2, 5, 2, 16], "float16"), ([2, 7, 1, 16], "float16"),
                                          ([2, 5, 2], "float16"), lq, lk, None], "actual_seq_lengths_key"),
    "lightning_indexer_grad": (lambda lq, lk: lig_inputs("BSND", "float16", "float16", lengths=False)[:5]
                               + [lq, lk, None],
                               "actual_seq_lengths_key"),
    SLI: (lambda lq, lk: sli_inputs("BSND", "bfloat16", "float32", rope=True, lengths=False)[:10]
          + [lq, lk, None, None],
          "actual_seq_lengths_key"),
    SLKG: (lambda lq, lk: lig_inputs("BSND", "float16", "float16", lengths=False)[:5] + [lq, lk, None],
           "actual_seq_lengths_key"),
    DLI: (lambda lq, lk: dense_inputs(DLI, "BSND", "float16", "float16", lengths=False)[:3] + [lq, lk, None],
          "actual_seq_lengths_key"),
    DLIG: (lambda lq, lk: dense_inputs(DLIG, "BSND", "bfloat16", "float32", lengths=False)[:11] + [lq, lk, None],
           "actual_seq_lengths_key"),
}


@pytest.mark.parametrize("op", sorted(LENGTHS_CASES))
@pytest.mark.parametrize("given", ["both", "query", "kv"])
def test_tiling_takes_bsnd_lengths(driver: Path, op: str, given: str) -> None:
    make, _ = LENGTHS_CASES[op]
    lens_dtype = "int64" if op.startswith("sparse_flash") else "int32"  # the table's: SFA takes both
    lens: Input = ([2], lens_dtype)
    inputs = make(lens if given != "kv" else None, lens if given != "query" else None)
    attrs = defaults(op, layout="BSND", **({"sparse_count": 6} if op == "lightning_indexer" else {}))
    assert adapter_infer(driver, op, inputs, attrs) == rules(op, inputs, attrs), "the shape rule accepts them"
    t = tiling(driver, op, inputs, attrs)
    expected = {"layout": 0, "batch": 2, "s1": 5, "s2": 7, "t1": 10, "t2": 14,
                "bsnd_lens": {"both": 3, "query": 1, "kv": 2}[given]}
    assert {key: t[key] for key in expected} == expected
    if op.startswith("sparse_flash"):
        assert t["seq_lens_int64"] == 1, "int64 lengths, whichever side is given"
    assert t["block_dim"] >= 1
    # Without lengths the same call tiles with none.
    assert tiling(driver, op, make(None, None), attrs)["bsnd_lens"] == 0


# ---------------------------------------------------------------- what CANN's contexts and platform do
# The runtime .ini values of the SoCs the op_host is tiled for (hicann/runtime
# src/platform/platform_config; test_stand_in_socs_are_the_ini_files compares them with the files):
# Short_SoC_version, NpuArch, cube_core_cnt, vector_core_cnt, ub_size, l1_size, l0_a/b/c_size.
SOC_INI = {
    "Ascend910B1": ("Ascend910B", 2201, 24, 48, 196608, 524288, 65536, 65536, 131072),
    "Ascend910B4": ("Ascend910B", 2201, 20, 40, 196608, 524288, 65536, 65536, 131072),
    "Ascend910_9392": ("Ascend910_93", 2201, 24, 48, 196608, 524288, 65536, 65536, 131072),
    "Ascend950PR_9599": ("Ascend950", 3510, 36, 72, 253952, 524288, 65536, 65536, 262144),
}
INI_KEYS = ("Short_SoC_version", "NpuArch", "cube_core_cnt", "vector_core_cnt", "ub_size", "l1_size", "l0_a_size",
            "l0_b_size", "l0_c_size")


def expected_platform(soc: str) -> dict[str, int]:
    """What PlatformAscendC reports (asc-devkit platform_ascendc.cpp): the ini's values, UB and L1
    256 bytes less on Ascend910B and Ascend910_93 (the Matmul client's reserve), a 16 MiB library
    workspace on NPU archs 2201 and 3510."""
    short, arch, aic, aiv, ub, l1, l0a, l0b, l0c = SOC_INI[soc]
    reserve = 256 if short in ("Ascend910B", "Ascend910_93") else 0
    return {"aiv": aiv, "aic": aic, "ub": ub - reserve, "l1": l1 - reserve, "l0a": l0a, "l0b": l0b, "l0c": l0c,
            "sys_workspace": 16 * 1024 * 1024 if arch in (2201, 3510) else 2 * 1024 * 1024}


@pytest.mark.parametrize("soc", sorted(SOC_INI))
def test_the_platform_the_tilings_get_is_the_socs(driver: Path, soc: str) -> None:
    # QueryPlatform (common/op_host_platform.h) on the SoC's platform: core counts per SoC, never a
    # constant, and the UB / L1 the real platform reports (196352 / 524032 on 910B and 910_93).
    out, err = run_driver(driver, "Rope platform", MGO_SOC=soc)
    assert out.startswith("ok "), err
    assert {k: int(v) for k, v in (w.split("=") for w in out.split()[1:])} == expected_platform(soc)


@pytest.mark.parametrize("soc", sorted(SOC_INI))
@pytest.mark.parametrize("op", ["cla_gate_merge", "sparse_flash_attention"])
def test_the_block_dim_is_the_socs_core_count(driver: Path, soc: str, op: str) -> None:
    # More rows than any SoC has cores: a vector kernel takes every AIV, a mixed one every AIC.
    if op == "cla_gate_merge":
        inputs: list[Input] = [([500, 3, 128], "float16")] * 2 + [([500, 3], "float16")] * 2
        attrs, cores = defaults(op), expected_platform(soc)["aiv"]
    else:
        inputs = [([400, 4, 32], "bfloat16"), ([500, 2, 32], "bfloat16"), ([500, 2, 32], "bfloat16"),
                  ([400, 2, 3], "int32"), None, None, ([2], "int32"), ([2], "int32"), None]
        attrs, cores = defaults(op, layout="TND", sparse_mode=0), expected_platform(soc)["aic"]
    out, err = run_adapter(driver, op, "tiling", inputs, attrs, MGO_SOC=soc)
    assert out.startswith("ok "), err
    assert f" block_dim={cores} " in out


def test_stand_in_socs_are_the_ini_files() -> None:
    # The stand-in's SoC table (cann_stub/tiling/platform/platform_ascendc.h) and SOC_INI hold the
    # values of runtime's .ini files.
    table = (Path(__file__).resolve().parent / "cann_stub" / "tiling" / "platform" / "platform_ascendc.h").read_text()
    rows = re.findall(r'\{"(\w+)", "(\w+)", (\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+)\}', table)
    assert {soc: (short, *map(int, rest)) for soc, short, *rest in rows} == SOC_INI
    runtime = os.environ.get("CANN_RUNTIME")
    if not runtime:
        pytest.skip("CANN_RUNTIME not set: the stand-in's SoCs are compared with runtime's .ini files only then")
    for soc, values in SOC_INI.items():
        ini, = [p for d in ("cann", "cann-dev") for p in (Path(runtime) / "src/platform/platform_config" / d).glob(
            f"{soc}.ini")]
        found = dict(ln.split("=", 1) for ln in ini.read_text().splitlines() if "=" in ln)
        assert tuple(found[k] for k in INI_KEYS) == tuple(map(str, values)), soc


def test_all_three_registration_paths_are_filled(driver: Path) -> None:
    # OP_ADD's three expansions, linked as CANN links them: InferShape and InferDataType
    # (OP_PROTO_LIB), Tiling and TilingParse (OP_TILING_LIB) in gert::OpImplRegistry.
    if not is_real(driver):
        pytest.skip("the stand-in has one OP_ADD expansion (OpDef only); the real libraries have three")
    for op in OPS:
        assert run_driver(driver, f"{OP_SPECS[op].op_type} registered") == ("ok 1 1 1 1", ""), op


ROPE_INPUTS: list[Input] = [([6, 256], "float16")] * 2 + [([16, 128], "float16")] * 2 + [([2], "int32")]


@pytest.mark.parametrize(("step", "env", "error"), [
    # GetTilingData<T>() is nullptr when the buffer is smaller than T (RopeTilingData: 36 bytes).
    ("tiling", {"MGO_TILING_BYTES": "35"}, "the tiling buffer is smaller than the tiling data (36 bytes)"),
    # GetWorkspaceSizes(1) is nullptr when the context has room for none.
    ("tiling", {"MGO_WORKSPACES": "0"}, "the tiling context has no room for 1 workspace size"),
    # GetOutputShape(1) is nullptr, SetOutputDataType(1, ..) fails, in a context of one output.
    ("shape", {"MGO_OUTPUTS": "1"}, "the InferShape context has no shape for output k_embed"),
    ("dtype", {"MGO_OUTPUTS": "1"}, "the InferDataType context took no dtype for output k_embed"),
])
def test_a_context_too_small_fails_the_launch_naming_the_op(driver: Path, step: str, env: dict[str, str],
                                                             error: str) -> None:
    inputs = ROPE_INPUTS if step != "dtype" else [([-2], dtype) for _, dtype in ROPE_INPUTS]
    out, err = run_adapter(driver, "rope", step, inputs, defaults("rope"), **env)
    assert out == "failed" and err == f"[ms_grad_ops] Rope: {error}"
    assert run_adapter(driver, "rope", step, inputs, defaults("rope"))[0].startswith("ok "), "the full context works"


@pytest.mark.parametrize(("step", "error"), [("shape", "the context has no shape for required input q_seq_len"),
                                             ("tiling", "the context has no shape for required input q_seq_len")])
def test_a_missing_required_input_is_named(driver: Path, step: str, error: str) -> None:
    # A context built with one IR input too few: its getters return nullptr for it.
    out, err = run_adapter(driver, "rope", step, ROPE_INPUTS[:4], defaults("rope"))
    assert out == "failed" and err == f"[ms_grad_ops] Rope: {error}"
