"""Bad input to sparse_flash_mla(_grad): ValueError/TypeError naming the op and the argument before any kernel
runs; bad index and length values found by the kernel: RuntimeError naming the op (docs/contract.md 0.9, 8)."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest

from ms_grad_ops import ops


def t(shape: tuple, dtype: ms.dtype = ms.float32) -> ms.Tensor:
    return ms.Tensor(np.zeros(shape, np.float32), dtype)


def i32(values: object) -> ms.Tensor:
    return ms.Tensor(np.asarray(values, np.int32))


# TND: 2 sequences of 3 queries, 4 original tokens, 2 compressed entries (ratio 2).
Q, ORI, CMP = t((6, 4, 8)), t((8, 1, 8)), t((4, 1, 8))
IDX = i32(np.zeros((6, 1, 3)))
LENS = dict(cu_seqlens_q=i32([0, 3, 6]), cu_seqlens_ori_kv=i32([0, 4, 8]), cu_seqlens_cmp_kv=i32([0, 2, 4]))
ATTRS = dict(cmp_ratio=2, layout="TND")


def fwd(**over: object) -> object:
    kw = dict(query=Q, ori_kv=ORI, cmp_kv=CMP, cmp_sparse_indices=IDX, **LENS, **ATTRS)
    kw.update(over)
    return ops.sparse_flash_mla(**kw)


def test_valid_call_runs() -> None:
    out, lse = fwd()
    assert out.shape == (6, 4, 8) and lse.shape == (1, 6, 4)


@pytest.mark.parametrize("over,kind,words", [
    (dict(query=t((6, 4))), ValueError,
     "argument 'query' must be 3-D (layout \"TND\"; pass layout=\"BSND\" for [B, S, N, D] tensors), got shape [6, 4]"),
    (dict(ori_kv=t((8, 1, 16))), ValueError, "argument 'ori_kv' dim 2 must be the head size D"),
    (dict(cmp_kv=t((4, 2, 8))), ValueError, "argument 'cmp_kv' dim 1 must be N2 of 'ori_kv'"),
    (dict(ori_kv=t((8, 3, 8))), ValueError, "must be a multiple of N2"),
    (dict(ori_kv=t((8, 1, 8), ms.float16)), TypeError, "argument 'ori_kv' must have the dtype of 'query'"),
    (dict(query=ms.Tensor(np.zeros((6, 4, 8), np.int32))), TypeError, "argument 'query' must be float16"),
    (dict(cmp_sparse_indices=IDX.astype(ms.int64)), TypeError, "argument 'cmp_sparse_indices' must be int32"),
    (dict(cmp_sparse_indices=i32(np.zeros((5, 1, 3)))), ValueError, "argument 'cmp_sparse_indices' dim 0"),
    (dict(cmp_kv=None, cu_seqlens_cmp_kv=None), ValueError, "'cmp_sparse_indices' needs 'cmp_kv'"),
    (dict(cu_seqlens_ori_kv=None), ValueError, "'cu_seqlens_q' and 'cu_seqlens_ori_kv' must both be given"),
    (dict(cu_seqlens_cmp_kv=None), ValueError, "'cu_seqlens_cmp_kv' with them"),
    (dict(cu_seqlens_ori_kv=i32([0, 8])), ValueError, "argument 'cu_seqlens_ori_kv' dim 0"),
    (dict(seqused_q=i32([1, 2, 3])), ValueError, "argument 'seqused_q' dim 0 must be the batch count"),
    (dict(cmp_residual_kv=ms.Tensor(np.zeros(2, np.int64))), TypeError, "'cmp_residual_kv' must be int32"),
    (dict(sinks=t((3,))), ValueError, "argument 'sinks' must have shape [N1] = [4]"),
    (dict(layout="BSND"), ValueError, "must be 4-D (layout \"BSND\"; pass layout=\"TND\" for [T, N, D] tensors)"),
    (dict(cmp_ratio=0), ValueError, "attribute 'cmp_ratio' must be an integer in [1, 128], got 0"),
    (dict(ori_mask_mode=1), ValueError, "attribute 'ori_mask_mode' must be one of 0 (no mask), 3"),
    (dict(ori_win_left=-2), ValueError, "attribute 'ori_win_left' must be an integer in [-1,"),
    (dict(softmax_scale="x"), TypeError, "attribute 'softmax_scale' must be a float"),
])
def test_bad_input_is_named(over: dict, kind: type, words: str) -> None:
    with pytest.raises(kind, match="^sparse_flash_mla: .*" + _re(words)):
        fwd(**over)


def _re(s: str) -> str:
    import re
    return re.escape(s)


def test_bsnd_takes_no_cumulative_lengths() -> None:
    with pytest.raises(ValueError, match="cu_seqlens_\\* inputs are TND lengths"):
        ops.sparse_flash_mla(t((2, 3, 4, 8)), t((2, 4, 1, 8)), cu_seqlens_q=i32([0, 3, 6]),
                             cu_seqlens_ori_kv=i32([0, 4, 8]), layout="BSND")


@pytest.mark.parametrize("over,words", [
    (dict(cmp_sparse_indices=i32(np.full((6, 1, 3), 2))), "cmp_sparse_indices value 2 at row 0"),
    (dict(cmp_sparse_indices=i32(np.full((6, 1, 3), -2))), "out of range [-1, 2)"),
    (dict(cu_seqlens_q=i32([1, 3, 6])), "cu_seqlens_q[0] must be 0"),
    (dict(cu_seqlens_ori_kv=i32([0, 5, 4])), "cu_seqlens_ori_kv must be non-decreasing"),
    (dict(cu_seqlens_cmp_kv=i32([0, 2, 3])), "the last entry of cu_seqlens_cmp_kv (3) must equal"),
    (dict(seqused_ori_kv=i32([5, 1])), "seqused_ori_kv[0] = 5 must be in [0, 4]"),
    (dict(cmp_residual_kv=i32([0, 2])), "cmp_residual_kv[1] = 2 must be in [0, cmp_ratio = 2)"),
])
def test_bad_values_are_a_runtime_error(over: dict, words: str) -> None:
    with pytest.raises(RuntimeError, match="sparse_flash_mla: .*" + _re(words)):
        out, _ = fwd(**over)
        out.asnumpy()


def test_grad_checks_its_own_inputs() -> None:
    out, lse = fwd()
    kw = dict(cmp_kv=CMP, cmp_sparse_indices=IDX, **LENS, **ATTRS)
    with pytest.raises(ValueError, match="^sparse_flash_mla_grad: argument 'softmax_lse' must have the shape"):
        ops.sparse_flash_mla_grad(Q, out, out, t((1, 6, 2)), ORI, **kw)
    with pytest.raises(TypeError, match="^sparse_flash_mla_grad: argument 'd_out' must have the dtype"):
        ops.sparse_flash_mla_grad(Q, out.astype(ms.float16), out, lse, ORI, **kw)
    with pytest.raises(RuntimeError, match="sparse_flash_mla_grad: cmp_sparse_indices value 7"):
        g = ops.sparse_flash_mla_grad(Q, out, out, lse, ORI, **{**kw, "cmp_sparse_indices": i32(np.full((6, 1, 3), 7))})
        g[0].asnumpy()
