"""Every output element of the sparse_flash_mla CPU kernels is written: the AOT entry points called directly into
outputs poisoned with NaN (tests/cpu/cpp/call_aot.cc), on cases with BSND padding rows (garbage indices), rows
that see no key, keys no row sees and -1/masked index slots; such elements come out as the reference's values
(zeros, the sink, -inf)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _aot_call import build_call_aot, call
from _smla_cases import INT_INPUTS, SmlaCase, make_case
from _util import assert_close, quantize

from ms_grad_ops import reference as ref

CASES = {
    "bsnd_csa": ("bfloat16", dict(layout="BSND", lens=[(7, 5), (3, 9)], kind="csa", n1=4, k=5, ratio=2, pad=3)),
    "tnd_hca": ("float16", dict(layout="TND", lens=[(6, 3), (5, 10)], kind="hca", n1=2, ratio=3, win_left=2,
                                ori_k=4)),
    "tnd_swa": ("float32", dict(layout="TND", lens=[(6, 2), (4, 4)], kind="swa", n1=2, win_left=1, sinks=False)),
}


@pytest.fixture(scope="module")
def call_aot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_call_aot(tmp_path_factory.mktemp("call_aot"))


def _attrs(case: SmlaCase) -> list[str]:
    a = case.attrs
    return [f"attr float softmax_scale {a['softmax_scale']!r}", f"attr int cmp_ratio {a['cmp_ratio']}",
            f"attr int ori_mask_mode {a['ori_mask_mode']}", f"attr int cmp_mask_mode {a['cmp_mask_mode']}",
            f"attr int ori_win_left {a['ori_win_left']}", f"attr int ori_win_right {a['ori_win_right']}",
            f"attr str layout {a['layout']}"]


def _inputs(case: SmlaCase, x: dict, dtype: str) -> list[tuple[np.ndarray, str]]:
    """ori_kv onwards: the sources, the int inputs (absent: empty), sinks."""
    cmp = (x["cmp_kv"], dtype) if x["cmp_kv"] is not None else (np.zeros(0), dtype)
    ints = [(case.ints[n] if case.ints[n] is not None else np.zeros(0, np.int32), "int32") for n in INT_INPUTS]
    sinks = case.arrays["sinks"]
    return [(x["ori_kv"], dtype), cmp, *ints, (sinks if sinks is not None else np.zeros(0, np.float32), "float32")]


@pytest.mark.parametrize("name", list(CASES))
def test_every_element_is_written(call_aot: Path, tmp_path: Path, name: str) -> None:
    dtype, kw = CASES[name]
    case = make_case(np.random.default_rng(21), **kw)
    x = {n: None if case.arrays[n] is None else quantize(case.arrays[n], dtype) for n in ("query", "ori_kv",
                                                                                          "cmp_kv")}
    kwargs = {**case.kwargs(), "cmp_kv": x["cmp_kv"]}
    want_out, want_lse = ref.sparse_flash_mla(x["query"], x["ori_kv"], **kwargs, **case.attrs)
    rest = _inputs(case, x, dtype)
    out, lse = call(call_aot, tmp_path, "SparseFlashMla", _attrs(case), [(x["query"], dtype), *rest],
                    [(x["query"].shape, dtype), (want_lse.shape, "float32")])
    assert_close(out.astype(np.float64), want_out, dtype, "attention", "attn_out")
    assert np.all(out[want_out == 0] == 0)
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
    fin = np.isfinite(want_lse)
    np.testing.assert_allclose(lse[fin], want_lse[fin], rtol=1e-5, atol=1e-5)

    out_q = quantize(want_out, dtype)
    d_out = quantize(np.random.default_rng(3).standard_normal(out_q.shape), dtype)
    lse32 = want_lse.astype(np.float32)
    want = ref.sparse_flash_mla_grad(x["query"], d_out, out_q, lse32, x["ori_kv"], **kwargs, **case.attrs)
    shapes = [(x["query"].shape, dtype), (x["ori_kv"].shape, dtype),
              ((x["cmp_kv"].shape if x["cmp_kv"] is not None else (0,)), dtype),
              ((case.arrays["sinks"].shape if case.arrays["sinks"] is not None else (0,)), "float32"),
              *[((case.ints[n].shape if case.ints[n] is not None else (0,)), "float32")
                for n in ("ori_sparse_indices", "cmp_sparse_indices")]]
    got = call(call_aot, tmp_path, "SparseFlashMlaGrad", _attrs(case),
               [(x["query"], dtype), (d_out, dtype), (out_q, dtype), (lse32, "float32"), *rest], shapes)
    for name_, g, w, (_, dt) in zip(("d_query", "d_ori_kv", "d_cmp_kv", "d_sinks", "ori_l1", "cmp_l1"), got,
                                        want, shapes):
        if w is None:
            assert g.size == 0, name_
            continue
        g = g.astype(np.float64)
        assert np.isfinite(g).all(), f"{name_}: an element was not written"
        assert_close(g, w, dt if dt != "float32" else dtype, "attention", name_)
        # exact zeros: rows that see no key (d_query), keys no row sees, -1 and masked slots (a one-key row's
        # d_query cancels to 0 only in float64, so it is not among them)
        zero = (w == 0) if name_ != "d_query" else np.broadcast_to((want_out == 0).all(-1, keepdims=True), w.shape)
        assert np.all(g[zero] == 0), name_
