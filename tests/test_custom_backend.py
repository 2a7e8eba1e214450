"""The ops.Custom factory: CPU registration, and the Ascend branch with the device target stubbed
(no NPU here: the Ascend primitive is only constructed, never run)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import ms_grad_ops
from ms_grad_ops import _custom
from ms_grad_ops._specs import OP_SPECS


def _info(prim: object) -> dict:
    return json.loads(prim.reg_info) if isinstance(prim.reg_info, str) else prim.reg_info


@pytest.mark.parametrize("name", sorted(OP_SPECS))
def test_cpu_primitive_declares_the_spec(name: str) -> None:
    spec = OP_SPECS[name]
    prim = _custom._build(name, "CPU", tuple((a.name, a.default) for a in spec.attrs))
    assert prim.func_type == "aot"
    path, symbol = prim.func.rsplit(":", 1)
    assert Path(path).is_absolute() and Path(path).exists() and symbol == spec.op_type
    info = _custom.reg_info(spec, "CPU", {a.name: a.default for a in spec.attrs})
    assert info["target"] == "CPU"
    assert [i["name"] for i in info["inputs"]] == list(spec.inputs)
    assert [o["name"] for o in info["outputs"]] == list(spec.outputs)
    assert [a["name"] for a in info["attr"]] == [a.name for a in spec.attrs]
    assert len(info["dtype_format"]) == len(spec.dtypes)


ASCEND_OPS = sorted(name for name, spec in OP_SPECS.items() if spec.ascend_dtypes)
CPU_ONLY_OPS = sorted(set(OP_SPECS) - set(ASCEND_OPS))


@pytest.mark.parametrize("name", ASCEND_OPS)
def test_ascend_branch_builds_the_aclnn_primitive(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = OP_SPECS[name]
    monkeypatch.setattr(_custom, "device_target", lambda: "Ascend")
    _custom._primitive_cached.cache_clear()
    try:
        prim = _custom.primitive(name)
    finally:
        _custom._primitive_cached.cache_clear()
    assert prim.func == spec.op_type and prim.func_type == "aot"
    info = _custom.reg_info(spec, "Ascend", {a.name: a.default for a in spec.attrs})
    assert info["target"] == "Ascend"
    assert [i["name"] for i in info["inputs"]] == list(spec.inputs)
    # Only what the Ascend OpDef declares: float16/bfloat16, int32 lengths.
    declared = {tuple(d[0] for d in row) for row in info["dtype_format"]}
    assert declared and all(not any(t in ("float32", "int64") for t in row) for row in declared)


def test_ascend_infer_callables_run_the_shared_rules() -> None:
    import mindspore as ms

    spec = OP_SPECS["cla_gate_backward"]
    out_shape, out_dtype = _custom.ascend_infer(spec, {"input_attn_layout": "TND"})
    assert out_shape([5, 3, 128], [5, 3, 128], [5, 3, 128], [5, 3], [5, 3]) == ([5, 3, 128], [5, 3, 128], [5, 3],
                                                                                [5, 3])
    assert out_dtype(*[ms.bfloat16] * 5) == (ms.bfloat16,) * 4
    with pytest.raises(ValueError, match="cla_gate_backward: argument 'global_gate_logits' dim 0 must be T"):
        out_shape([5, 3, 128], [5, 3, 128], [5, 3, 128], [4, 3], [4, 3])
    merge_shape, merge_dtype = _custom.ascend_infer(OP_SPECS["cla_gate_merge"], {})
    assert merge_shape([2, 1, 256], [2, 1, 256], [2, 1], [2, 1]) == [2, 1, 256]
    assert merge_dtype(*[ms.float16] * 4) == ms.float16


@pytest.mark.parametrize("name", CPU_ONLY_OPS)
def test_ops_without_an_ascend_kernel_say_so(name: str) -> None:
    with pytest.raises(RuntimeError, match=f"{name}: no Ascend kernel exists yet"):
        _custom._build(name, "Ascend", tuple((a.name, a.default) for a in OP_SPECS[name].attrs))


def test_unsupported_device_target_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="rope_grad: device target 'GPU' is not supported"):
        _custom._build("rope_grad", "GPU", (("mode", "atb"),))


def test_vendor_folder_is_prepended_to_the_custom_opp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vendor = tmp_path / "vendors" / "ms_grad_ops"
    vendor.mkdir(parents=True)
    monkeypatch.setattr(ms_grad_ops, "_VENDOR_DIR", tmp_path / "vendors")
    monkeypatch.setenv("ASCEND_CUSTOM_OPP_PATH", "/opt/other")
    ms_grad_ops._register_ascend_vendor()
    ms_grad_ops._register_ascend_vendor()
    import os
    assert os.environ["ASCEND_CUSTOM_OPP_PATH"] == f"{vendor}:/opt/other"
