"""hyper-parallel's npu_sparse_flash_mla / npu_sparse_flash_mla_grad (ms_grad_ops.builtins) chained as
mindformers' FusedSparseFlashMlaWithIndexerLoss chains them on BSND: the forward with the lse, then the grad fed
its out and lse, whose cmp_softmax_l1_norm is the indexer's KL target; against the float64 reference."""
from __future__ import annotations

import inspect

import mindspore as ms
import numpy as np
import pytest
from _smla_cases import make_case
from _util import assert_close, to_np

from ms_grad_ops import builtins
from ms_grad_ops import reference as ref


def test_signatures_are_hyper_parallels() -> None:
    fwd = list(inspect.signature(builtins.npu_sparse_flash_mla).parameters)
    assert fwd == ["query", "ori_kv", "cmp_kv", "cmp_sparse_indices", "cu_seq_lens_q", "cu_seq_lens_ori_kv",
                   "cu_seq_lens_cmp_kv", "seqused_q", "seqused_ori_kv", "seqused_cmp_kv", "cmp_residual_kv", "sinks",
                   "softmax_scale", "cmp_ratio", "ori_mask_mode", "cmp_mask_mode", "ori_win_left", "ori_win_right",
                   "layout", "return_softmax_lse"]
    grad = list(inspect.signature(builtins.npu_sparse_flash_mla_grad).parameters)
    assert grad == ["query", "dout", "attn_out", "softmax_lse", "ori_kv", "cmp_kv", "ori_sparse_indices",
                    "cmp_sparse_indices", "cu_seq_lens_q", "cu_seq_lens_ori_kv", "cu_seq_lens_cmp_kv", "seqused_q",
                    "seqused_ori_kv", "seqused_cmp_kv", "cmp_residual_kv", "ori_topk_length", "cmp_topk_length",
                    "sinks", "softmax_scale", "cmp_ratio", "ori_mask_mode", "cmp_mask_mode", "ori_win_left",
                    "ori_win_right", "layout"]


@pytest.mark.parametrize("kind,ratio", [("csa", 4), ("hca", 8)])
def test_mindformers_chain(kind: str, ratio: int) -> None:
    case = make_case(np.random.default_rng(31), layout="BSND", lens=[(16, 16), (16, 16)], kind=kind, n1=8, d=32,
                     k=4, ratio=ratio, win_left=7, pad=0)
    a, ints = case.arrays, case.ints
    def f32(x: np.ndarray) -> ms.Tensor:
        return ms.Tensor(np.asarray(x, np.float32))

    def t(n: str) -> ms.Tensor | None:
        return None if ints[n] is None else ms.Tensor(ints[n])

    common = dict(ori_kv=f32(a["ori_kv"]), cmp_kv=f32(a["cmp_kv"]), cmp_sparse_indices=t("cmp_sparse_indices"),
                  cmp_residual_kv=t("cmp_residual_kv"), seqused_q=t("seqused_q"), seqused_ori_kv=t("seqused_ori_kv"),
                  seqused_cmp_kv=t("seqused_cmp_kv"), sinks=ms.Tensor(a["sinks"]), **case.attrs)
    out, lse = builtins.npu_sparse_flash_mla(f32(a["query"]), **common, return_softmax_lse=True)
    dout = np.random.default_rng(2).standard_normal(a["query"].shape)
    grads = builtins.npu_sparse_flash_mla_grad(f32(a["query"]), f32(dout), out, lse, ori_sparse_indices=None,
                                               **common)
    assert len(grads) == 6 and grads[4] is None
    r_out, r_lse = ref.sparse_flash_mla(a["query"], a["ori_kv"], **case.kwargs(), **case.attrs)
    assert_close(to_np(out), r_out, "float32", "attention", "attn_out")
    np.testing.assert_allclose(lse.asnumpy(), r_lse, rtol=1e-5, atol=1e-5)
    want = ref.sparse_flash_mla_grad(a["query"], dout, to_np(out), lse.asnumpy(), a["ori_kv"], **case.kwargs(),
                                     **case.attrs)
    for name, g, w in zip(("d_query", "d_ori_kv", "d_cmp_kv", "d_sinks"), grads, want):
        assert_close(to_np(g), w, "float32", "attention", name)
    if kind == "csa":
        np.testing.assert_allclose(grads[5].asnumpy(), want[5], rtol=0, atol=2e-6)
    else:
        assert grads[5] is None


def test_topk_lengths_are_refused() -> None:
    q = ms.Tensor(np.zeros((1, 2, 2, 8), np.float32))
    with pytest.raises(ValueError, match="sparse_flash_mla_grad: argument 'cmp_topk_length'"):
        builtins.npu_sparse_flash_mla_grad(q, q, q, ms.Tensor(np.zeros((1, 1, 2, 2), np.float32)), ori_kv=q[:, :, :1],
                                           cmp_topk_length=ms.Tensor(np.zeros((1, 2, 1), np.int32)))
