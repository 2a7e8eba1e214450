"""GRAPH mode with dynamic shapes (Cell.set_inputs): one compiled graph of the V4 ops serves several token counts,
sequence counts and compressed lengths (docs/contract.md sections 8 and 9.2), each compared with the float64
reference."""
from __future__ import annotations

from collections.abc import Iterator

import mindspore as ms
import numpy as np
import pytest
from _smla_cases import make_case
from _util import OpCell, assert_close, quantize, to_ms, to_np

from ms_grad_ops import ops
from ms_grad_ops import reference as ref

BF16 = "bfloat16"
# (lens per sequence, compressed ratio): the same graph for 1, 2 and 3 sequences of other lengths
SIZES = [([(7, 7), (3, 9)], 4), ([(12, 12)], 4), ([(2, 5), (6, 6), (4, 11)], 4)]
ATTR_NAMES = ("softmax_scale", "cmp_ratio", "ori_mask_mode", "cmp_mask_mode", "ori_win_left", "ori_win_right",
              "layout")
INTS = ("cmp_sparse_indices", "cu_seqlens_q", "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv", "cmp_residual_kv")


@pytest.fixture
def graph_mode() -> Iterator[None]:
    ms.set_context(mode=ms.GRAPH_MODE)
    yield
    ms.set_context(mode=ms.PYNATIVE_MODE)


def _dyn(rank: int, dtype: ms.dtype) -> ms.Tensor:
    return ms.Tensor(shape=[None] * rank, dtype=dtype)


def test_sparse_flash_mla_forward_and_grad_dynamic_tnd(graph_mode: None) -> None:
    """CSA in TND: query/ori/cmp token counts, the sequence count (cu_seqlens length) and K fixed, the rest
    dynamic; the forward and the grad each compiled once."""
    d, n1, k = 16, 4, 5
    attrs = None
    fwd = grad = None
    rng = np.random.default_rng(41)
    for lens, ratio in SIZES:
        case = make_case(rng, layout="TND", lens=lens, kind="csa", n1=n1, d=d, k=k, ratio=ratio, win_left=3)
        if attrs is None:
            attrs = {n: case.attrs[n] for n in ATTR_NAMES}
            fwd, grad = OpCell(_forward, attrs), OpCell(_grad, attrs)
            fwd.set_inputs(_dyn(3, ms.bfloat16), _dyn(3, ms.bfloat16), _dyn(3, ms.bfloat16), _dyn(3, ms.int32),
                           *(_dyn(1, ms.int32) for _ in range(4)), _dyn(1, ms.float32))
            grad.set_inputs(*(_dyn(3, ms.bfloat16) for _ in range(3)), _dyn(3, ms.float32), _dyn(3, ms.bfloat16),
                            _dyn(3, ms.bfloat16), _dyn(3, ms.int32), *(_dyn(1, ms.int32) for _ in range(4)),
                            _dyn(1, ms.float32))
        assert {n: case.attrs[n] for n in ATTR_NAMES} == attrs
        x = {n: quantize(case.arrays[n], BF16) for n in ("query", "ori_kv", "cmp_kv")}
        ints = [ms.Tensor(case.ints[n]) for n in INTS]
        sinks = case.arrays["sinks"]
        out, lse = fwd(*(to_ms(x[n], BF16) for n in ("query", "ori_kv", "cmp_kv")), *ints, ms.Tensor(sinks))
        kw = {**case.kwargs(), "cmp_kv": x["cmp_kv"]}
        want_out, want_lse = ref.sparse_flash_mla(x["query"], x["ori_kv"], **kw, **case.attrs)
        what = f"dynamic sparse_flash_mla {lens}"
        assert_close(to_np(out), want_out, BF16, what=what)
        assert_close(lse.asnumpy().astype(np.float64), want_lse, "float32", what=what + " lse")
        o = quantize(want_out, BF16)
        lse32 = want_lse.astype(np.float32)
        d_out = quantize(rng.standard_normal(o.shape), BF16)
        got = grad(to_ms(x["query"], BF16), to_ms(d_out, BF16), to_ms(o, BF16), ms.Tensor(lse32),
                   to_ms(x["ori_kv"], BF16), to_ms(x["cmp_kv"], BF16), *ints, ms.Tensor(sinks))
        want = ref.sparse_flash_mla_grad(x["query"], d_out, o, lse32.astype(np.float64), x["ori_kv"], **kw,
                                         **case.attrs)
        for name, g, w in zip(("d_query", "d_ori_kv", "d_cmp_kv", "d_sinks", "cmp_softmax_l1_norm"),
                              (got[0], got[1], got[2], got[3], got[5]), (*want[:4], want[5])):
            assert_close(to_np(g), w, BF16, what=f"{what} {name}")


def _forward(q: ms.Tensor, ori: ms.Tensor, cmp: ms.Tensor, idx: ms.Tensor, cu_q: ms.Tensor, cu_o: ms.Tensor,
             cu_c: ms.Tensor, res: ms.Tensor, sinks: ms.Tensor, **attrs: object) -> tuple:
    return ops.sparse_flash_mla(q, ori, cmp, cmp_sparse_indices=idx, cu_seqlens_q=cu_q, cu_seqlens_ori_kv=cu_o,
                                cu_seqlens_cmp_kv=cu_c, cmp_residual_kv=res, sinks=sinks, **attrs)


def _grad(q: ms.Tensor, d_out: ms.Tensor, out: ms.Tensor, lse: ms.Tensor, ori: ms.Tensor, cmp: ms.Tensor,
          idx: ms.Tensor, cu_q: ms.Tensor, cu_o: ms.Tensor, cu_c: ms.Tensor, res: ms.Tensor, sinks: ms.Tensor,
          **attrs: object) -> tuple:
    return ops.sparse_flash_mla_grad(q, d_out, out, lse, ori, cmp, cmp_sparse_indices=idx, cu_seqlens_q=cu_q,
                                     cu_seqlens_ori_kv=cu_o, cu_seqlens_cmp_kv=cu_c, cmp_residual_kv=res,
                                     sinks=sinks, **attrs)


def test_sparse_lightning_indexer_kl_loss_grad_dynamic(graph_mode: None) -> None:
    """TND compressed keys (ratio 4 with residuals): token counts, sequence count and K dynamic in one graph."""
    cell = OpCell(ops.sparse_lightning_indexer_kl_loss_grad, {"layout": "TND", "sparse_mode": 3, "cmp_ratio": 4})
    cell.set_inputs(_dyn(3, ms.float16), _dyn(3, ms.float16), _dyn(2, ms.float32), _dyn(3, ms.int32),
                    _dyn(3, ms.float32), *(_dyn(1, ms.int32) for _ in range(3)))
    rng = np.random.default_rng(43)
    for lens_q, lens_k, k in (([5, 3], [2, 4], 3), ([9], [3], 5), ([2, 2, 6], [1, 3, 2], 2)):
        t1, t2, nidx, didx = sum(lens_q), sum(lens_k), 4, 8
        qi = quantize(rng.standard_normal((t1, nidx, didx)) * 0.5, "float16")
        ki = quantize(rng.standard_normal((t2, 1, didx)), "float16")
        w = rng.standard_normal((t1, nidx)).astype(np.float32).astype(np.float64)
        idx = np.concatenate([np.where(rng.random((s1, 1, k)) < 0.2, -1, rng.integers(0, s2, (s1, 1, k)))
                              for s1, s2 in zip(lens_q, lens_k)]).astype(np.int32)
        p = (rng.random(idx.shape) / k).astype(np.float32).astype(np.float64)
        res = rng.integers(0, 4, len(lens_q)).astype(np.int32)
        cq, ck = np.cumsum(lens_q).astype(np.int32), np.cumsum(lens_k).astype(np.int32)
        got = cell(to_ms(qi, "float16"), to_ms(ki, "float16"), ms.Tensor(w, ms.float32), ms.Tensor(idx),
                   ms.Tensor(p, ms.float32), ms.Tensor(cq), ms.Tensor(ck), ms.Tensor(res))
        want = ref.sparse_lightning_indexer_kl_loss_grad(qi, ki, w, idx, p, list(cq), list(ck), list(res),
                                                         layout="TND", sparse_mode=3, cmp_ratio=4)
        for name, g, wv in zip(("d_query_index", "d_key_index", "d_weights", "softmax_out", "loss"), got,
                               (*want[:4], np.asarray([want[4]]))):
            assert_close(to_np(g), wv, "float16", what=f"dynamic kl_loss_grad {lens_q}/{lens_k} {name}")
