"""sparse_flash_attention(_grad): bad inputs raise clear errors; results are bitwise identical
for 1 and 2 OpenMP threads."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from _paths import SUPPORT
from _sfa_data import make_case
from _util import Fn
from mindspore import Tensor

from ms_grad_ops import ops
from ms_grad_ops._specs import OP_SPECS

F32 = np.float32
_ATTRS = {op: {a.name for a in OP_SPECS[op].attrs} for op in OP_SPECS}


def _t(shape: tuple, dtype: type = F32) -> Tensor:
    return Tensor(np.zeros(shape, dtype))


def _fwd_args(t1: int = 4, t2: int = 6, n1: int = 2, d: int = 8, dr: int = 4, k: int = 3) -> dict:
    return dict(query=_t((t1, n1, d)), key=_t((t2, 1, d)), value=_t((t2, 1, d)),
                sparse_indices=Tensor(np.full((t1, 1, k), -1, np.int32)), query_rope=_t((t1, n1, dr)),
                key_rope=_t((t2, 1, dr)), actual_seq_lengths_query=[t1], actual_seq_lengths_kv=[t2])


def _fwd(**over: object) -> object:
    args = _fwd_args()
    attrs = dict(scale_value=0.5, layout="TND")
    for name, value in over.items():
        (attrs if name in _ATTRS["sparse_flash_attention"] else args)[name] = value
    return ops.sparse_flash_attention(**args, **attrs)


@pytest.mark.parametrize("over,err,msg", [
    (dict(key=_t((6, 1, 7)), value=_t((6, 1, 7))), ValueError,
     r"sparse_flash_attention: argument 'key' dim 2 must be the head size D of 'query' = 8, got shape \[6, 1, 7\]"),
    (dict(value=_t((6, 1, 9))), ValueError, r"argument 'value' must have the shape of 'key' \[6, 1, 8\]"),
    (dict(query=_t((4, 2, 2, 8))), ValueError,
     r"argument 'query' must be 3-D \(layout \"TND\"; pass layout=\"BSND\" for \[B, S, N, D\] tensors\), "
     r"got shape \[4, 2, 2, 8\]"),
    (dict(key=_t((6, 3, 8)), value=_t((6, 3, 8))), ValueError, r"N1 = 2 of 'query' must be a multiple of N2 = 3"),
    (dict(sparse_indices=Tensor(np.zeros((5, 1, 3), np.int32))), ValueError,
     r"argument 'sparse_indices' dim 0 must be the matching dim of 'query' = 4"),
    (dict(sparse_indices=Tensor(np.zeros((4, 1, 3), np.int64))), TypeError,
     r"argument 'sparse_indices' must be int32, got int64"),
    (dict(key=_t((6, 1, 8), np.float16)), TypeError,
     r"argument 'key' must have the dtype of 'query' \(float32\), got float16"),
    (dict(query=Tensor(np.zeros((4, 2, 8), np.float64))), TypeError,
     r"argument 'query' must be float16, bfloat16 or float32, got float64"),
    (dict(key_rope=_t((6, 1, 5))), ValueError, r"argument 'key_rope' dim 2 must be the rope size Dr"),
    (dict(key_rope=None), ValueError, r"'query_rope' and 'key_rope' must be given together"),
    (dict(layout="BNSD"), ValueError, r"attribute 'layout' must be one of \"BSND\", \"TND\", got \"BNSD\""),
    (dict(sparse_mode=1), ValueError,
     r"attribute 'sparse_mode' must be one of 0 \(no mask\), 3 \(rightDownCausal\), got 1"),
    (dict(sparse_block_size=0), ValueError,
     r"attribute 'sparse_block_size' must be an integer in \[1, 2147483647\], got 0"),
    (dict(actual_seq_lengths_query=None), ValueError,
     r"arguments 'actual_seq_lengths_query' and 'actual_seq_lengths_kv' must both be given or both be None"),
    (dict(layout="BSND", query=_t((1, 4, 2, 8)), key=_t((1, 6, 1, 8)), value=_t((1, 6, 1, 8)),
          sparse_indices=Tensor(np.full((1, 4, 1, 3), -1, np.int32)), query_rope=None, key_rope=None,
          actual_seq_lengths_query=[5]), ValueError,
     r"actual_seq_lengths_query\[0\] = 5 must be in \[0, 4\] in BSND layout \(per-batch valid lengths"),
    (dict(layout="BSND", query=_t((1, 4, 2, 8)), key=_t((1, 6, 1, 8)), value=_t((1, 6, 1, 8)),
          sparse_indices=Tensor(np.full((1, 4, 1, 3), -1, np.int32)), query_rope=None, key_rope=None,
          actual_seq_lengths_query=[4, 4]), ValueError,
     r"argument 'actual_seq_lengths_query' dim 0 must be the batch size B of 'query' \(BSND lengths are per "
     r"batch\) = 1, got shape \[2\]"),
    (dict(actual_seq_lengths_kv=[5]), ValueError,
     r"the last entry of 'actual_seq_lengths_kv' \(5\) must equal the number of tokens 6"),
    (dict(actual_seq_lengths_query=[3, 1], actual_seq_lengths_kv=[3, 6]), ValueError,
     r"must be non-decreasing cumulative lengths \(>= 0; CANN convention"),
    (dict(actual_seq_lengths_query=[1.0, 4.0]), TypeError, r"must hold integers"),
])
def test_forward_validation_errors(over: dict, err: type, msg: str) -> None:
    with pytest.raises(err, match=msg):
        _fwd(**over)


def _sync(outputs: tuple) -> None:
    """PyNative launches asynchronously: a kernel error surfaces when a result is read."""
    for x in outputs:
        if x is not None:
            x.asnumpy()


def _grad(**over: object) -> object:
    a = _fwd_args()
    args = dict(query=a["query"], key=a["key"], value=a["value"], sparse_indices=a["sparse_indices"],
                d_out=_t((4, 2, 8)), out=_t((4, 2, 8)), softmax_max=_t((1, 4, 2)), softmax_sum=_t((1, 4, 2)),
                actual_seq_lengths_query=[4], actual_seq_lengths_kv=[6], query_rope=a["query_rope"],
                key_rope=a["key_rope"])
    attrs = dict(scale_value=0.5, layout="TND")
    for name, value in over.items():
        (attrs if name in _ATTRS["sparse_flash_attention_grad"] else args)[name] = value
    return ops.sparse_flash_attention_grad(**args, **attrs)


@pytest.mark.parametrize("over,err,msg", [
    (dict(softmax_max=_t((1, 4, 3))), ValueError, r"sparse_flash_attention_grad: argument 'softmax_max' must have "
                                                  r"the shape of 'the statistics shape' \[1, 4, 2\]"),
    (dict(softmax_sum=_t((1, 4, 2), np.float16)), TypeError, r"argument 'softmax_sum' must be float32, got float16"),
    (dict(d_out=_t((4, 2, 7))), ValueError, r"argument 'd_out' must have the shape of 'query'"),
    (dict(out=_t((4, 2, 8), np.float16)), TypeError, r"argument 'out' must have the dtype of 'query'"),
    (dict(pre_tokens=10), ValueError, r"attribute 'pre_tokens' must be one of 2147483647 \(unbounded\), got 10"),
])
def test_grad_validation_errors(over: dict, err: type, msg: str) -> None:
    with pytest.raises(err, match=msg):
        _grad(**over)


def test_grad_without_rope_returns_none() -> None:
    g = _grad(query_rope=None, key_rope=None)
    assert g[3] is None and g[4] is None and g[0].shape == (4, 2, 8)


@pytest.mark.parametrize("bad", [6, -2, 100])
@pytest.mark.parametrize("which", ["forward", "grad"])
def test_out_of_range_index_raises_runtime_error(which: str, bad: int) -> None:
    idx = np.full((4, 1, 3), -1, np.int32)
    idx[2, 0, 1] = bad  # 6 keys, bs 1: valid blocks are 0..5
    op = "sparse_flash_attention" if which == "forward" else "sparse_flash_attention_grad"
    with pytest.raises(RuntimeError, match=rf"{op}: sparse_indices value {bad} at row 2, group 0, slot 1 "
                                           r"is out of range \[-1, 6\)"):
        _sync((_fwd if which == "forward" else _grad)(sparse_indices=Tensor(idx)))


def test_out_of_range_index_in_graph_mode() -> None:
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        idx = np.zeros((4, 1, 3), np.int32)
        idx[0, 0, 0] = 9
        a = _fwd_args()

        def f(q: Tensor, k: Tensor, v: Tensor, i: Tensor, lq: Tensor, lkv: Tensor) -> tuple:
            return ops.sparse_flash_attention(q, k, v, i, None, None, lq, lkv, scale_value=0.5, layout="TND")

        with pytest.raises(RuntimeError, match="sparse_flash_attention: sparse_indices value 9"):
            out = Fn(f)(a["query"], a["key"], a["value"], Tensor(idx), Tensor(np.array([4], np.int32)),
                        Tensor(np.array([6], np.int32)))
            out[0].asnumpy()
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def test_bad_length_tensor_values_raise_runtime_error() -> None:
    with pytest.raises(RuntimeError, match=r"sparse_flash_attention: the last entry of actual_seq_lengths_kv \(5\) "
                                           r"must equal the number of tokens 6"):
        _sync(_fwd(actual_seq_lengths_kv=Tensor(np.array([5], np.int64))))


_DETERMINISM_SCRIPT = r"""
import hashlib, sys
import numpy as np, mindspore as ms
ms.set_device("CPU")
sys.path.insert(0, sys.argv[1])
from _sfa_data import make_case
from _util import quantize, to_ms
from ms_grad_ops import ops
# dense: every row selects all its visible blocks (reversed), so the kernels group rows
dense = np.full((200, 1, 48), -1, np.int32)
row = 0
for s1_len, s2_len in ((70, 80), (90, 90), (40, 30)):
    for i in range(s1_len):
        limit = min(s2_len - 1, i + s2_len - s1_len)
        nb = limit // 2 + 1 if limit >= 0 else 0
        dense[row, 0, :nb] = np.arange(nb)[::-1]
        row += 1
for dtype, select in (("bfloat16", "random"), ("float32", "random"), ("bfloat16", "dense"), ("float32", "dense")):
    c = make_case(np.random.default_rng(0), layout="TND", lens_q=[70, 90, 40], lens_kv=[80, 90, 30], n1=4, d=32,
                  dr=8, k=24, bs=2, pattern="mixed")
    t = {n: to_ms(quantize(getattr(c, n), dtype), dtype) for n in ("query", "key", "value", "query_rope", "key_rope")}
    idx = ms.Tensor(c.sparse_indices if select == "random" else dense)
    out, m, s = ops.sparse_flash_attention(t["query"], t["key"], t["key"], idx, t["query_rope"], t["key_rope"],
                                           c.lens_q, c.lens_kv, **c.attrs())
    do = to_ms(np.random.default_rng(1).standard_normal(out.shape), dtype)
    g = ops.sparse_flash_attention_grad(t["query"], t["key"], t["key"], idx, do, out, m, s, c.lens_q, c.lens_kv,
                                        t["query_rope"], t["key_rope"], **c.attrs())
    fused = ops.sparse_flash_attention_grad(t["query"], t["key"], None, idx, do, out, m, s, c.lens_q, c.lens_kv,
                                            t["query_rope"], t["key_rope"], **c.attrs())
    h = hashlib.sha256()
    for x in (out, m, s, *(f for f in (*g, *fused) if f is not None)):
        h.update(x.asnumpy().tobytes() if x.dtype != ms.bfloat16 else x.float().asnumpy().tobytes())
    print(dtype, select, h.hexdigest())
"""


def test_bitwise_identical_for_1_and_2_threads(tmp_path: Path) -> None:
    script = tmp_path / "det.py"
    script.write_text(_DETERMINISM_SCRIPT)
    tests_dir = str(SUPPORT)
    digests = []
    for threads in ("1", "2"):
        env = dict(os.environ, OMP_NUM_THREADS=threads)
        res = subprocess.run([sys.executable, str(script), tests_dir], env=env, cwd=tmp_path, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        digests.append([line for line in res.stdout.splitlines() if line.startswith(("bfloat16", "float32"))])
    assert len(digests[0]) == 4 and digests[0] == digests[1]


def test_make_case_hits_every_slot_pattern() -> None:
    """The data generator really produces -1 at the start, middle and end of rows."""
    c = make_case(np.random.default_rng(0), layout="TND", lens_q=[12], lens_kv=[12], k=8, pattern="mixed")
    rows = c.sparse_indices[:, 0]
    assert (rows[:, 0] == -1).any() and (rows[:, -1] == -1).any()
    assert any((r[1:-1] == -1).any() and (r[0] != -1) and (r[-1] != -1) for r in rows)
