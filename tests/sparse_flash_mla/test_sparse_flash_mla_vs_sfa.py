"""sparse_flash_mla against the package's own sparse_flash_attention with sinks over the concatenated keys
(``value=None``, keys ``cat([ori_kv, cmp_kv])`` per sequence, indices ``[band ; cmp + S2]``, sparse_mode 0): the
two kernels compute one definition, so out, lse (max + ln sum), every gradient and the sinks' agree to float32
rounding (docs/contract.md section 8)."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _smla_cases import make_case

from ms_grad_ops import ops
from ms_grad_ops.reference.sparse_flash_mla import rows

CASES = {
    "csa": dict(layout="TND", lens=[(12, 12), (5, 17)], kind="csa", n1=4, d=32, k=6, ratio=4, win_left=7),
    "hca": dict(layout="TND", lens=[(10, 16), (9, 9)], kind="hca", n1=2, d=16, ratio=3, win_left=4),
    "swa": dict(layout="TND", lens=[(8, 8)], kind="swa", n1=2, d=16, win_left=3),
}


def _concatenated(case) -> tuple:  # noqa: ANN001
    """SFA inputs: per sequence its original tokens then its compressed entries; per row its band and its
    compressed keys as indices local to that sequence (compressed ones offset by S2), -1 padded."""
    a, ints = case.arrays, case.ints
    cmp = a["cmp_kv"] if a["cmp_kv"] is not None else np.zeros((0, *a["ori_kv"].shape[1:]))
    cu_o = ints["cu_seqlens_ori_kv"]
    cu_c = ints["cu_seqlens_cmp_kv"] if ints["cu_seqlens_cmp_kv"] is not None else np.zeros_like(cu_o)
    keys, kv_lens = [], []
    for b in range(len(cu_o) - 1):
        keys += [a["ori_kv"][cu_o[b]:cu_o[b + 1]], cmp[cu_c[b]:cu_c[b + 1]]]
        kv_lens.append(int(cu_o[b + 1] - cu_o[b] + cu_c[b + 1] - cu_c[b]))
    key = np.concatenate(keys)
    sel = list(rows(a["query"], a["ori_kv"], a["cmp_kv"], None, ints["cmp_sparse_indices"], ints["cu_seqlens_q"],
                    cu_o, ints["cu_seqlens_cmp_kv"], None, None, None, ints["cmp_residual_kv"],
                    **{k: v for k, v in case.attrs.items() if k != "softmax_scale"}))
    width = max(len(r.ori[0][0]) + len(r.cmp[0][0]) for r in sel)
    idx = np.full((a["query"].shape[0], 1, max(width, 1)), -1, np.int32)
    for r in sel:
        b = r.b
        local = np.concatenate([r.ori[0][0] - cu_o[b], r.cmp[0][0] - cu_c[b] + (cu_o[b + 1] - cu_o[b])])
        idx[r.t, 0, :local.size] = local
    return key, idx, np.cumsum(kv_lens).astype(np.int32)


@pytest.mark.parametrize("name", list(CASES))
def test_mla_equals_sfa_over_concatenated_keys(name: str) -> None:
    case = make_case(np.random.default_rng(11), **CASES[name])
    a, ints, attrs = case.arrays, case.ints, case.attrs
    def f32(x: np.ndarray) -> ms.Tensor:
        return ms.Tensor(np.asarray(x, np.float32))

    q, ori = f32(a["query"]), f32(a["ori_kv"])
    cmp = None if a["cmp_kv"] is None else f32(a["cmp_kv"])
    sinks = ms.Tensor(a["sinks"])
    mi = {n: None if v is None else ms.Tensor(v) for n, v in ints.items()}
    out, lse = ops.sparse_flash_mla(q, ori, cmp, **{k: v for k, v in mi.items()}, sinks=sinks, **attrs)

    key, idx, kv_cu = _concatenated(case)
    lq = ints["cu_seqlens_q"][1:]
    s_out, s_max, s_sum = ops.sparse_flash_attention(q, f32(key), None, ms.Tensor(idx), None, None,
                                                     ms.Tensor(lq), ms.Tensor(kv_cu), sinks,
                                                     scale_value=attrs["softmax_scale"], layout="TND",
                                                     sparse_mode=0)
    np.testing.assert_allclose(out.asnumpy(), s_out.asnumpy(), rtol=0, atol=3e-6)
    np.testing.assert_allclose(lse.asnumpy(), s_max.asnumpy() + np.log(s_sum.asnumpy()), rtol=0, atol=3e-6)

    d_out = f32(np.random.default_rng(2).standard_normal(a["query"].shape))
    g = ops.sparse_flash_mla_grad(q, d_out, out, lse, ori, cmp, **{k: v for k, v in mi.items()}, sinks=sinks,
                                  **attrs)
    sg = ops.sparse_flash_attention_grad(q, f32(key), None, ms.Tensor(idx), d_out, s_out, s_max, s_sum,
                                         ms.Tensor(lq), ms.Tensor(kv_cu), None, None, sinks,
                                         scale_value=attrs["softmax_scale"], layout="TND", sparse_mode=0)
    d_key = sg[1].asnumpy()
    cu_o = ints["cu_seqlens_ori_kv"]
    cu_c = ints["cu_seqlens_cmp_kv"] if ints["cu_seqlens_cmp_kv"] is not None else np.zeros_like(cu_o)
    pos = 0
    d_ori_s, d_cmp_s = [], []
    for b in range(len(cu_o) - 1):
        n_o, n_c = int(cu_o[b + 1] - cu_o[b]), int(cu_c[b + 1] - cu_c[b])
        d_ori_s.append(d_key[pos:pos + n_o])
        d_cmp_s.append(d_key[pos + n_o:pos + n_o + n_c])
        pos += n_o + n_c

    def close(x: np.ndarray, y: np.ndarray, what: str) -> None:
        np.testing.assert_allclose(x, y, rtol=0, atol=3e-6 * max(1.0, np.abs(y).max()), err_msg=what)

    close(g[0].asnumpy(), sg[0].asnumpy(), "d_query")
    close(g[1].asnumpy(), np.concatenate(d_ori_s), "d_ori_kv")
    if cmp is not None:
        close(g[2].asnumpy(), np.concatenate(d_cmp_s), "d_cmp_kv")
    close(g[3].asnumpy(), sg[5].asnumpy(), "d_sinks")
