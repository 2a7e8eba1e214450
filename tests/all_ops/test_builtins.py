"""ms_grad_ops.builtins: MindSpore 2.10's built-in signatures (parsed from the installed
functional_overload.py), install()/uninstall() on every name, results and gradients against the
float64 reference through the installed names in PyNative and GRAPH mode, and the arguments CPU
cannot honour."""
from __future__ import annotations

import ast
import inspect
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import mindspore as ms
import mindspore.ops.functional_overload as functional_overload
import numpy as np
import pytest
from _util import assert_close, quantize, to_ms, to_np
from mindspore import Tensor, nn
from mindspore import ops as msops

from ms_grad_ops import builtins
from ms_grad_ops import reference as ref

NAMES = ("sparse_flash_attention", "lightning_indexer")


@pytest.fixture()
def installed() -> Iterator[None]:
    assert builtins.install()
    yield
    builtins.uninstall()


# --------------------------------------------------------------------------------------------
# Signatures
# --------------------------------------------------------------------------------------------
def _documented_signature(name: str) -> inspect.Signature:
    """The first line of the built-in's docstring in the installed functional_overload.py, as a
    signature ("2^63-1" is MindSpore's notation for 2**63 - 1)."""
    source = Path(functional_overload.__file__).read_text()
    doc = ast.get_docstring(next(n for n in ast.parse(source).body
                                 if isinstance(n, ast.FunctionDef) and n.name == name))
    first = doc.strip().splitlines()[0]
    head = re.sub(r"\s*->.*$", "", first).replace("2^63-1", str(2**63 - 1))
    assert head.startswith(f"{name}("), first
    namespace: dict = {}
    exec(f"def {head}: pass", namespace)  # noqa: S102 - MindSpore's own docstring line
    return inspect.signature(namespace[name])


@pytest.mark.parametrize("name", NAMES)
def test_signature_equals_mindspore(name: str) -> None:
    want = _documented_signature(name)
    got = inspect.signature(getattr(builtins, name))
    assert [(p.name, p.kind, p.default) for p in got.parameters.values()] == \
        [(p.name, p.kind, p.default) for p in want.parameters.values()]
    assert len(want.parameters) >= 13  # the parse found the real line, not a stub


# --------------------------------------------------------------------------------------------
# install / uninstall
# --------------------------------------------------------------------------------------------
def _holders() -> list[tuple[types.ModuleType, str]]:
    import mindspore.ops.function as function
    import mindspore.ops.function.nn_func as nn_func
    import mindspore.ops.functional as functional
    return [(msops, "sparse_flash_attention"), (msops, "lightning_indexer"),
            (functional_overload, "sparse_flash_attention"), (functional_overload, "lightning_indexer"),
            (function, "lightning_indexer"), (nn_func, "lightning_indexer"), (functional, "lightning_indexer")]


def test_install_binds_every_name_and_uninstall_restores() -> None:
    holders = _holders()
    originals = [getattr(m, n) for m, n in holders]
    assert not any(o is getattr(builtins, n) for o, (_, n) in zip(originals, holders))
    user = types.ModuleType("user_module_imported_before_install")
    user.lightning_indexer = msops.lightning_indexer  # `from mindspore.ops import lightning_indexer`
    sys.modules[user.__name__] = user
    try:
        assert builtins.install() and builtins.install()  # idempotent
        assert builtins.installed()
        for module, name in holders:
            assert getattr(module, name) is getattr(builtins, name), f"{module.__name__}.{name}"
        assert user.lightning_indexer is builtins.lightning_indexer
        builtins.uninstall()
        builtins.uninstall()
        assert not builtins.installed()
        for (module, name), original in zip(holders, originals):
            assert getattr(module, name) is original, f"{module.__name__}.{name} not restored"
        assert user.lightning_indexer is originals[1]
    finally:
        builtins.uninstall()
        del sys.modules[user.__name__]


def test_install_leaves_other_device_targets_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builtins, "_device_target", lambda: "Ascend")
    originals = [getattr(m, n) for m, n in _holders()]
    assert builtins.install() is False
    assert not builtins.installed()
    assert [getattr(m, n) for m, n in _holders()] == originals


# --------------------------------------------------------------------------------------------
# Results through the installed names, PyNative and GRAPH
# --------------------------------------------------------------------------------------------
class _SfaCell(nn.Cell):
    """Calls ``mindspore.ops.sparse_flash_attention`` (resolved at compile time in GRAPH mode)."""

    def __init__(self, layout: str, return_softmax_lse: bool) -> None:
        super().__init__()
        self.layout = layout
        self.lse = return_softmax_lse

    def construct(self, q: Tensor, k: Tensor, v: Tensor, idx: Tensor, qr: Tensor, kr: Tensor, lq: Tensor,
                  lk: Tensor) -> tuple:
        return msops.sparse_flash_attention(q, k, v, idx, 0.3, actual_seq_lengths_query=lq,
                                            actual_seq_lengths_kv=lk, query_rope=qr, key_rope=kr,
                                            layout_query=self.layout, layout_kv=self.layout, attention_mode=2,
                                            return_softmax_lse=self.lse)


def _sfa_case(rng: np.random.Generator, layout: str) -> tuple[dict, list | None]:
    """BSND [2, 5, 4, 8] / [2, 6, 1, 8] or TND with lengths [5, 2] / [6, 3]; rope 4; K 3 with -1 slots."""
    if layout == "BSND":
        qs, ks, ids, lens, high = (2, 5, 4), (2, 6, 1), (2, 5, 1, 3), None, 6
    else:
        qs, ks, ids, lens, high = (7, 4), (9, 1), (7, 1, 3), ([5, 7], [6, 9]), 3
    arr = {"q": rng.standard_normal((*qs, 8)), "k": rng.standard_normal((*ks, 8)), "v": rng.standard_normal((*ks, 8)),
           "qr": rng.standard_normal((*qs, 4)), "kr": rng.standard_normal((*ks, 4))}
    idx = rng.integers(-1, high, ids).astype(np.int32)
    idx[..., 0] = 0
    return {**{k: quantize(v, "float32") for k, v in arr.items()}, "idx": idx}, lens


@pytest.mark.parametrize("layout", ["BSND", "TND"])
def test_sparse_flash_attention_matches_reference(installed: None, exec_mode: str, layout: str) -> None:
    c, lens = _sfa_case(np.random.default_rng(11), layout)
    lq, lk = (None, None) if lens is None else (Tensor(np.array(x, np.int32)) for x in lens)
    for lse in (True, False):
        got = _SfaCell(layout, lse)(*(to_ms(c[n], "float32") for n in ("q", "k", "v")), Tensor(c["idx"]),
                                    to_ms(c["qr"], "float32"), to_ms(c["kr"], "float32"), lq, lk)
        assert isinstance(got, tuple) and len(got) == 3  # the built-in's tuple either way
        want = ref.sparse_flash_attention(c["q"], c["k"], c["v"], c["idx"], c["qr"], c["kr"],
                                          *(lens or (None, None)), scale_value=0.3, layout=layout)
        for g, w, what in zip(got, want, ("attention_out", "softmax_max", "softmax_sum")):
            assert g.dtype == (ms.float32), what
            assert_close(to_np(g), w, "float32", "attention", f"{what} (return_softmax_lse={lse})")
    assert got[1].shape == ((2, 1, 5, 4) if layout == "BSND" else (1, 7, 4))  # [B, N2, S1, G] / [N2, T1, G]


class _LiCell(nn.Cell):
    def __init__(self, k: int, layout: str) -> None:
        super().__init__()
        self.k = k
        self.layout = layout

    def construct(self, q: Tensor, k: Tensor, w: Tensor) -> tuple:
        return msops.lightning_indexer(q, k, w, layout_query=self.layout, layout_key=self.layout, sparse_count=self.k,
                                       return_value=True)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_lightning_indexer_values_in_query_dtype(installed: None, exec_mode: str, dtype: str) -> None:
    rng = np.random.default_rng(12)
    q, k, w = (quantize(rng.standard_normal(s), dtype) for s in ((2, 5, 4, 8), (2, 5, 1, 8), (2, 5, 4)))
    indices, values = _LiCell(7, "BSND")(to_ms(q, dtype), to_ms(k, dtype), to_ms(w, dtype))
    want_idx, want_val = ref.lightning_indexer(q, k, w, sparse_count=7, layout="BSND")
    assert indices.dtype == ms.int32 and indices.shape == (2, 5, 1, 7)
    assert values.dtype == to_ms(q, dtype).dtype and values.shape == (2, 5, 1, 7)
    np.testing.assert_array_equal(indices.asnumpy(), want_idx)
    assert (indices.asnumpy()[:, 0, 0, 1:] == -1).all()  # query 0 sees one key: -1 padding
    v = to_np(values)
    assert np.isneginf(v[want_idx < 0]).all()
    live = want_idx >= 0
    assert_close(v[live], quantize(want_val[live], dtype), dtype, "attention", "sparse_values")


# --------------------------------------------------------------------------------------------
# Gradients through the installed names
# --------------------------------------------------------------------------------------------
def test_sparse_flash_attention_grad(installed: None, exec_mode: str) -> None:
    c, _ = _sfa_case(np.random.default_rng(13), "BSND")
    dout = np.random.default_rng(14).standard_normal(c["q"].shape)
    cell = _SfaCell("BSND", True)

    def loss(q: Tensor, k: Tensor, v: Tensor, qr: Tensor, kr: Tensor) -> Tensor:
        out = cell(q, k, v, Tensor(c["idx"]), qr, kr, None, None)[0]
        return (out * Tensor(dout.astype(np.float32))).sum()

    names = ("q", "k", "v", "qr", "kr")
    got = ms.grad(loss, grad_position=(0, 1, 2, 3, 4))(*(to_ms(c[n], "float32") for n in names))
    out, smax, ssum = ref.sparse_flash_attention(c["q"], c["k"], c["v"], c["idx"], c["qr"], c["kr"], scale_value=0.3)
    dq, dk, dv, dqr, dkr = ref.sparse_flash_attention_grad(c["q"], c["k"], c["v"], c["idx"], dout, out, smax, ssum,
                                                           None, None, c["qr"], c["kr"], scale_value=0.3)
    for g, w, n in zip(got, (dq, dk, dv, dqr, dkr), names):
        assert_close(to_np(g), w, "float32", "attention", f"d_{n}")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["BSND", "TND"])
def test_lightning_indexer_values_grad(installed: None, exec_mode: str, layout: str, dtype: str) -> None:
    """d(sum(values * c)) over the valid slots, for query, key and weights, against the float64
    reference of the value gradient; the -1 slots (-inf values) carry nothing."""
    rng = np.random.default_rng(15)
    shapes = ((2, 6, 3, 8), (2, 6, 1, 8), (2, 6, 3)) if layout == "BSND" else ((9, 3, 8), (9, 1, 8), (9, 3))
    q, k, w = (quantize(rng.standard_normal(s), dtype) for s in shapes)
    kk = 4
    cell = _LiCell(kk, layout)
    idx, _ = ref.lightning_indexer(q, k, w, sparse_count=kk, layout=layout)
    coef = rng.standard_normal(idx.shape) * (idx >= 0)

    def loss(q: Tensor, k: Tensor, w: Tensor) -> Tensor:
        _, values = cell(q, k, w)
        values = values.astype(ms.float32)  # MindSpore's CPU ops mostly lack bfloat16
        finite = msops.select(values > -3.0e38, values, msops.zeros_like(values))
        return (finite * Tensor(coef.astype(np.float32))).sum()

    got = ms.grad(loss, grad_position=(0, 1, 2))(*(to_ms(a, dtype) for a in (q, k, w)))
    want = ref.lightning_indexer_grad(q, k, w, idx, coef, layout=layout)
    for g, wv, n in zip(got, want, ("d_query", "d_key", "d_weights")):
        assert np.linalg.norm(wv) > 0, n
        assert g.dtype == to_ms(q, dtype).dtype, n
        assert_close(to_np(g), wv, dtype, "attention", n)


# --------------------------------------------------------------------------------------------
# Arguments CPU cannot honour
# --------------------------------------------------------------------------------------------
def _sfa_args() -> tuple:
    rng = np.random.default_rng(16)
    q, k = Tensor(rng.standard_normal((1, 3, 2, 8)).astype(np.float32)), Tensor(rng.standard_normal((1, 3, 1, 8))
                                                                              .astype(np.float32))
    return q, k, k, Tensor(np.zeros((1, 3, 1, 2), np.int32)), 0.5


def _li_args() -> tuple:
    rng = np.random.default_rng(17)
    return (Tensor(rng.standard_normal((1, 3, 2, 8)).astype(np.float32)),
            Tensor(rng.standard_normal((1, 3, 1, 8)).astype(np.float32)),
            Tensor(rng.standard_normal((1, 3, 2)).astype(np.float32)))


BLOCK = Tensor(np.zeros((1, 1), np.int32))
SFA_BAD = [({"block_table": BLOCK}, "block_table"), ({"layout_kv": "PA_BSND"}, "layout_kv"),
           ({"layout_query": "TND", "layout_kv": "BSND"}, "layout_kv"), ({"layout_query": "SBH", "layout_kv": "SBH"},
                                                                           "layout_query"),
           ({"pre_tokens": 5}, "pre_tokens"), ({"next_tokens": 0}, "next_tokens"), ({"attention_mode": 1},
                                                                                    "attention_mode"),
           ({"attention_mode": 2}, "attention_mode=2"), ({"sparse_mode": 2}, "sparse_mode")]
LI_BAD = [({"block_table": BLOCK}, "block_table"), ({"layout_key": "PA_BSND"}, "layout_key"),
          ({"layout_query": "BSND", "layout_key": "TND"}, "layout_key"), ({"pre_tokens": 1}, "pre_tokens"),
          ({"next_tokens": 7}, "next_tokens"), ({"sparse_mode": 1}, "sparse_mode")]


@pytest.mark.parametrize(("kwargs", "arg"), SFA_BAD, ids=[a for _, a in SFA_BAD])
def test_sparse_flash_attention_rejects(kwargs: dict, arg: str) -> None:
    with pytest.raises(ValueError, match=rf"sparse_flash_attention: .*{re.escape(arg)}"):
        builtins.sparse_flash_attention(*_sfa_args(), **kwargs)


@pytest.mark.parametrize(("kwargs", "arg"), LI_BAD, ids=[a for _, a in LI_BAD])
def test_lightning_indexer_rejects(kwargs: dict, arg: str) -> None:
    with pytest.raises(ValueError, match=rf"lightning_indexer: .*'{arg}'"):
        builtins.lightning_indexer(*_li_args(), sparse_count=2, **kwargs)


def test_rejected_at_graph_compile(installed: None) -> None:
    class Bad(nn.Cell):
        def construct(self, q: Tensor, k: Tensor, w: Tensor) -> tuple:
            return msops.lightning_indexer(q, k, w, sparse_count=2, pre_tokens=16)

    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        with pytest.raises(ValueError, match="lightning_indexer: argument 'pre_tokens'"):
            Bad()(*_li_args())
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def test_defaults_accepted() -> None:
    """The documented defaults (and 2^31-1, the aclnn default) pass; 0-mode/no-rope attention too."""
    out = builtins.sparse_flash_attention(*_sfa_args(), pre_tokens=2**31 - 1, sparse_mode=0)
    assert len(out) == 3 and out[0].shape == (1, 3, 2, 8)
    idx, val = builtins.lightning_indexer(*_li_args(), sparse_count=2, next_tokens=2**31 - 1)
    assert idx.shape == val.shape == (1, 3, 1, 2)
