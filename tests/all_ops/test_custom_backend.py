"""The ops.Custom factory: CPU registration, and the Ascend branch with the device target stubbed
(no NPU here: the Ascend primitive is only constructed, never run)."""
from __future__ import annotations

import inspect
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

import ms_grad_ops
from ms_grad_ops import _bprops, _custom
from ms_grad_ops._specs import OP_SPECS


def _info(prim: object) -> dict:
    return json.loads(prim.reg_info) if isinstance(prim.reg_info, str) else prim.reg_info


def _attrs(spec: object) -> dict[str, object]:
    """Every attribute of ``spec``: the table's default, 0.5 for a required one (scale_value)."""
    return {a.name: 0.5 if a.required else a.default for a in spec.attrs}


@pytest.mark.parametrize("name", sorted(OP_SPECS))
def test_cpu_primitive_declares_the_spec(name: str) -> None:
    spec = OP_SPECS[name]
    prim = _custom._build(name, "CPU", tuple(_attrs(spec).items()))
    assert prim.func_type == "aot"
    path, symbol = prim.func.rsplit(":", 1)
    assert Path(path).is_absolute() and Path(path).exists() and symbol == spec.op_type
    info = _custom.reg_info(spec, "CPU", _attrs(spec))
    assert info["target"] == "CPU"
    assert [i["name"] for i in info["inputs"]] == list(spec.inputs)
    assert [o["name"] for o in info["outputs"]] == list(spec.outputs)
    assert [a["name"] for a in info["attr"]] == [a.name for a in spec.attrs]
    assert len(info["dtype_format"]) == len(spec.dtypes)


ASCEND_OPS = sorted(name for name, spec in OP_SPECS.items() if spec.ascend_dtypes)


def test_every_operator_is_registered_for_ascend() -> None:
    # One op per operator (no variants), and every one has an Ascend kernel and reg_info (issue 38 gave the V4
    # ops theirs): the table declares Ascend dtypes and SoCs for each.
    assert ASCEND_OPS == sorted(OP_SPECS)
    assert all(spec.optional <= set(spec.inputs) for spec in OP_SPECS.values())
    assert all(spec.ascend_socs for spec in OP_SPECS.values())


def test_an_op_without_ascend_dtypes_is_refused_on_ascend_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    # The guard for an op added CPU first (no OpDef in the custom op package yet): a spec without Ascend dtypes.
    name = "rope"
    monkeypatch.setitem(OP_SPECS, name, replace(OP_SPECS[name], ascend_dtypes=(), ascend_socs=()))
    with pytest.raises(RuntimeError, match=f"^{name}: no Ascend kernel yet"):
        _custom._build.__wrapped__(name, "Ascend", tuple(_attrs(OP_SPECS[name]).items()))


@pytest.mark.parametrize("name", ASCEND_OPS)
def test_ascend_branch_builds_the_aclnn_primitive(name: str) -> None:
    spec = OP_SPECS[name]
    prim = _custom._build(name, "Ascend", tuple(_attrs(spec).items()))
    assert prim.func == spec.op_type and prim.func_type == "aot"
    info = _info(prim)
    assert info["target"] == "Ascend"
    assert [i["name"] for i in info["inputs"]] == list(spec.inputs)
    assert [o["name"] for o in info["outputs"]] == list(spec.outputs)
    assert [a["name"] for a in info["attr"]] == [a.name for a in spec.attrs]
    # Exactly what the Ascend OpDef declares (tests/ascend/test_ascendc_op_host.py): 16-bit float inputs.
    declared = {tuple(d[0] for d in row) for row in info["dtype_format"]}
    assert declared == set(spec.ascend_dtypes) and declared <= set(spec.dtypes)
    assert {row[0] for row in declared} == {"float16", "bfloat16"}


@pytest.mark.parametrize("name", ASCEND_OPS)
def test_ascend_primitive_with_the_device_target_stubbed(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_custom, "device_target", lambda: "Ascend")
    _custom._primitive_cached.cache_clear()
    try:
        assert _custom.primitive(name, **_attrs(OP_SPECS[name])).func == OP_SPECS[name].op_type
    finally:
        _custom._primitive_cached.cache_clear()


def _sfa(layout: str) -> tuple[list, list]:
    """SFA inputs and outputs: B = 2, S1 = 5, S2 = 7 (TND: T1 = 10, T2 = 14), N1 = 4, N2 = 2, D = 32,
    Dr = 16, K = 3, sinks [N1]; TND with lengths."""
    lq, lk = ([2, 5], [2, 7]) if layout == "BSND" else ([10], [14])
    q, k, qr, kr = [*lq, 4, 32], [*lk, 2, 32], [*lq, 4, 16], [*lk, 2, 16]
    lens = [[0], [0]] if layout == "BSND" else [[2], [2]]
    stats = [2, 2, 5, 2] if layout == "BSND" else [2, 10, 2]
    return [q, k, k, [*lq, 2, 3], qr, kr, *lens, [4]], [q, stats, stats]


# (attributes, input shapes, expected output shapes, input dtypes with X = the float dtype,
# expected output dtypes) per op, from the shape rules of docs/contract.md.
X = "X"
INFER_CASES = {
    "rope": ({}, [[6, 256], [6, 256], [16, 128], [16, 128], [2]], [[6, 256], [6, 256]], [X] * 4 + ["int32"], [X] * 2),
    "rope_grad": ({"mode": "vjp"}, [[6, 256], [6, 256], [16, 128], [16, 128], [2]], [[6, 256], [6, 256]],
                  [X] * 4 + ["int32"], [X] * 2),
    "cla_gate_merge": ({}, [[5, 3, 128]] * 2 + [[5, 3]] * 2, [[5, 3, 128]], [X] * 4, [X]),
    "cla_gate_backward": ({"input_attn_layout": "TND"}, [[5, 3, 128]] * 3 + [[5, 3]] * 2,
                          [[5, 3, 128]] * 2 + [[5, 3]] * 2, [X] * 5, [X] * 4),
    "lightning_indexer": ({"sparse_count": 3, "layout": "TND", "sparse_mode": 3},
                          [[6, 4, 32], [8, 1, 32], [6, 4], [2], [2], [2]], [[6, 1, 3], [6, 1, 3]],
                          [X, X, "float32", "int32", "int32", "int32"], ["int32", "float32"]),
    "lightning_indexer_grad": ({"layout": "TND", "sparse_mode": 0},
                               [[6, 4, 32], [8, 1, 32], [6, 4], [6, 1, 3], [6, 1, 3], [2], [2], [0]],
                               [[6, 4, 32], [8, 1, 32], [6, 4]],
                               [X, X, "float32", "int32", "float32", "int32", "int32", "int32"], [X, X, "float32"]),
    "sparse_lightning_indexer_grad_kl_loss": (
        {"scale_value": 0.5, "layout": "TND", "sparse_mode": 3, "deterministic": True},
        [[6, 4, 32], [8, 1, 32], [6, 2, 16], [8, 1, 16], [6, 2], [6, 1, 3], [1, 6, 4], [1, 6, 4], [6, 4, 16],
         [8, 1, 16], [2], [2], [4], [2]],
        [[6, 2, 16], [8, 1, 16], [6, 2], [1]],
        [X, X, X, X, X, "int32", "float32", "float32", X, X, "int32", "int32", "float32", "int32"],
        [X, X, X, "float32"]),
    "sparse_lightning_indexer_kl_loss_grad": ({"layout": "TND", "sparse_mode": 3, "cmp_ratio": 4},
                                              [[6, 4, 32], [8, 1, 32], [6, 4], [6, 1, 3], [6, 1, 3], [2], [2], [2]],
                                              [[6, 4, 32], [8, 1, 32], [6, 4], [6, 1, 3], [1]],
                                              [X, X, "float32", "int32", "float32", "int32", "int32", "int32"],
                                              [X, X, "float32", "float32", "float32"]),
    "dense_lightning_indexer_softmax_lse": ({"layout": "TND", "sparse_mode": 3},
                                            [[6, 4, 32], [8, 1, 32], [6, 4], [2], [2], [0]], [[1, 6], [1, 6]],
                                            [X, X, "float32", "int32", "int32", "int32"], ["float32", "float32"]),
    "dense_lightning_indexer_grad_kl_loss": (
        {"scale_value": 0.5, "layout": "TND", "sparse_mode": 3, "deterministic": True},
        [[6, 4, 32], [8, 1, 32], [6, 2, 16], [8, 1, 16], [6, 2], [1, 6, 4], [1, 6, 4], [1, 6], [1, 6], [6, 4, 16],
         [8, 1, 16], [2], [2], [2]],
        [[6, 2, 16], [8, 1, 16], [6, 2], [1]],
        [X, X, X, X, X, "float32", "float32", "float32", "float32", X, X, "int32", "int32", "int32"],
        [X, X, X, "float32"]),
    "sparse_flash_attention": ({"scale_value": 0.125, "sparse_block_size": 2, "layout": "BSND", "sparse_mode": 0},
                               *_sfa("BSND"), [X, X, X, "int32", X, X, "int32", "int32", "float32"],
                               [X, "float32", "float32"]),
    "sparse_flash_attention_grad": (
        {"scale_value": 0.125, "sparse_block_size": 2, "layout": "TND", "sparse_mode": 3, "deterministic": True},
        [*_sfa("TND")[0][:4], _sfa("TND")[0][0], _sfa("TND")[0][0], [2, 10, 2], [2, 10, 2], [2], [2],
         *_sfa("TND")[0][4:6], [4]],
        [_sfa("TND")[0][i] for i in (0, 1, 2, 4, 5, 8)],
        [X, X, X, "int32", X, X, "float32", "float32", "int32", "int32", X, X, "float32"], [X] * 5 + ["float32"]),
    "sparse_flash_mla": ({"layout": "TND", "cmp_ratio": 4},
                         [[9, 4, 16], [40, 1, 16], [10, 1, 16], [0], [9, 1, 6], [3], [3], [3], [0], [0], [0], [2],
                          [4]],
                         [[9, 4, 16], [1, 9, 4]], [X, X, X, *["int32"] * 9, "float32"], [X, "float32"]),
    # CSA in TND (D 512, N2 1, K 512: the Ascend limits), no ori_sparse_indices (its norm empty), no seqused
    "sparse_flash_mla_grad": (
        {"softmax_scale": 0.05, "cmp_ratio": 4, "layout": "TND"},
        [[6, 2, 512]] * 3 + [[1, 6, 2], [8, 1, 512], [2, 1, 512], [0], [6, 1, 512], [2], [2], [2], [0], [0], [0],
                             [1], [2]],
        [[6, 2, 512], [8, 1, 512], [2, 1, 512], [2], [0], [6, 1, 512]],
        [X, X, X, "float32", X, X, *["int32"] * 9, "float32"], [X] * 3 + ["float32"] * 3),
}


def test_infer_cases_cover_every_ascend_operator() -> None:
    assert set(INFER_CASES) == set(ASCEND_OPS)


@pytest.mark.parametrize("name", sorted(INFER_CASES))
@pytest.mark.parametrize("x", ["float16", "bfloat16"])
def test_ascend_infer_callables_take_every_spec_attribute(name: str, x: str) -> None:
    # ascend_infer passes all the spec's attributes, by name, to the _validate binding: a binding
    # that takes another list fails here (it did for sparse_flash_attention_grad and
    # sparse_lightning_indexer_grad_kl_loss), whatever the attributes' values.
    import mindspore as ms

    spec = OP_SPECS[name]
    changes, shapes, want_shapes, dtypes, want_dtypes = INFER_CASES[name]
    attrs = {**_attrs(spec), **changes}
    out_shape, out_dtype = _custom.ascend_infer(spec, attrs)
    ms_dtype = {"float16": ms.float16, "bfloat16": ms.bfloat16, "float32": ms.float32, "int32": ms.int32}
    got_shapes = out_shape(*shapes)
    got_dtypes = out_dtype(*(ms_dtype[x if t == X else t] for t in dtypes))
    single = len(spec.outputs) == 1
    assert got_shapes == (want_shapes[0] if single else tuple(want_shapes))
    want = tuple(ms_dtype[x if t == X else t] for t in want_dtypes)
    assert got_dtypes == (want[0] if single else want)


def test_validate_bindings_take_exactly_the_spec_attributes() -> None:
    # The one mapping: each binding's parameters after (shapes, dtypes) are the spec's attribute
    # names in spec order (_checks.validate passes them positionally, ascend_infer by name).
    from ms_grad_ops import _validate

    for name in INFER_CASES:
        params = re.findall(r"(\w+):", getattr(_validate, name).__doc__.split("->")[0])
        assert params == ["shapes", "dtypes", *(a.name for a in OP_SPECS[name].attrs)], name


def test_ascend_infer_callables_raise_the_rules_errors() -> None:
    import mindspore as ms

    spec = OP_SPECS["cla_gate_backward"]
    out_shape, out_dtype = _custom.ascend_infer(spec, {"input_attn_layout": "TND"})
    with pytest.raises(ValueError, match="cla_gate_backward: argument 'global_gate_logits' dim 0 must be T"):
        out_shape([5, 3, 128], [5, 3, 128], [5, 3, 128], [4, 3], [4, 3])
    with pytest.raises(TypeError, match="cla_gate_backward"):
        out_dtype(ms.float16, ms.bfloat16, ms.float16, ms.float16, ms.float16)


def test_unsupported_device_target_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="rope_grad: device target 'GPU' is not supported"):
        _custom._build("rope_grad", "GPU", (("mode", "atb"),))
    # A forward op names itself, not the grad op whose primitive its bprop would need.
    with pytest.raises(RuntimeError, match="^rope: device target 'GPU' is not supported"):
        _custom._build("rope", "GPU", ())


def _check_wiring(name: str, grad_name: str) -> None:
    """The bprop of forward op ``name`` hands its grad op the sources of DERIVATIVES in order and
    returns, per forward input, its grad output or zeros."""
    import mindspore as ms
    import numpy as np
    from mindspore import Tensor

    from ms_grad_ops._specs import DERIVATIVES

    fwd, grad, pairing = OP_SPECS[name], OP_SPECS[grad_name], DERIVATIVES[name]
    inputs = {n: Tensor(np.full(2, i, np.float32), ms.float32) for i, n in enumerate(fwd.inputs)}
    many = len(fwd.outputs) > 1
    out = tuple(f"result.{o}" for o in fwd.outputs) if many else f"result.{fwd.outputs[0]}"
    dout = tuple(f"grad.{o}" for o in fwd.outputs) if many else f"grad.{fwd.outputs[0]}"
    calls = []

    def fake_grad(*args: object) -> tuple:
        calls.append(args)
        return tuple(f"{grad_name}.{o}" for o in grad.outputs)

    got = _bprops.bprop_of(name, fake_grad)(*inputs.values(), out, dout)
    assert len(calls) == 1 and len(calls[0]) == len(grad.inputs)
    for source, arg in zip(pairing.inputs, calls[0]):
        assert arg is inputs[source] if source in inputs else arg == source, (name, source)
    assert len(got) == len(fwd.inputs)
    for n, g in zip(fwd.inputs, got):
        if n in pairing.gradients:
            assert g == f"{grad_name}.{pairing.gradients[n]}", (name, n)
        else:
            assert g.shape == (2,) and not g.asnumpy().any(), (name, n)


@pytest.mark.parametrize("name", sorted(OP_SPECS))
def test_bprop_takes_every_input_of_the_table(name: str) -> None:
    spec = OP_SPECS[name]
    pairing = _bprops.grad_op(name, _attrs(spec))
    if pairing is not None:
        assert pairing[0] in OP_SPECS
        with pytest.raises(ValueError, match=f"{name}: its bprop needs the primitive of {pairing[0]}"):
            _bprops.bprop_of(name, None)
        _check_wiring(name, pairing[0])
        bprop = _bprops.bprop_of(name, lambda *args: args)
    else:
        bprop = _bprops.bprop_of(name, None)
        # GRAPH mode parses the bprop's source: it must be found, with one parameter per input.
        assert f'raise RuntimeError("{name} has no gradient: ' in inspect.getsource(bprop)
        with pytest.raises(RuntimeError, match=f"^{name} has no gradient: "):
            bprop(*range(len(spec.inputs)), None, None)
    assert len(inspect.signature(bprop).parameters) == len(spec.inputs) + 2


def test_no_gradient_bprop_for_any_input_count() -> None:
    # The generated bprop of every op without a gradient: the op's inputs by name (an input called
    # out gets a trailing _), then out and dout; the message is the table's reason.
    from ms_grad_ops._bprop_table import NO_GRADIENT_BPROPS
    from ms_grad_ops._specs import no_gradient_reason

    assert set(NO_GRADIENT_BPROPS) == {n for n in OP_SPECS if no_gradient_reason(n) is not None}
    for name, bprop in NO_GRADIENT_BPROPS.items():
        inputs = [f"{n}_" if n in ("out", "dout") else n for n in OP_SPECS[name].inputs]
        assert list(inspect.signature(bprop).parameters) == [*inputs, "out", "dout"], name
        with pytest.raises(RuntimeError, match=f"^{name} has no gradient: {re.escape(no_gradient_reason(name))}$"):
            bprop(*range(len(inputs) + 2))


def test_vendor_folder_is_prepended_to_the_custom_opp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vendor = tmp_path / "vendors" / "ms_grad_ops"
    vendor.mkdir(parents=True)
    monkeypatch.setattr(ms_grad_ops, "_VENDOR_DIR", tmp_path / "vendors")
    monkeypatch.setenv("ASCEND_CUSTOM_OPP_PATH", "/opt/other")
    ms_grad_ops._register_ascend_vendor()
    ms_grad_ops._register_ascend_vendor()
    import os
    assert os.environ["ASCEND_CUSTOM_OPP_PATH"] == f"{vendor}:/opt/other"
