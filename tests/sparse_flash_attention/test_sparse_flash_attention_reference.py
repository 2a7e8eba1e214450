"""The float64 reference of sparse flash attention vs dense masked attention and finite differences."""
from __future__ import annotations

import numpy as np
import pytest
from _sfa_data import Case, make_case

from ms_grad_ops.reference import sparse_flash_attention, sparse_flash_attention_grad


def _dense(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """Dense attention over the whole key axis with a [T1, N2, T2] selection mask (slot counts)."""
    if case.layout == "BSND":
        b, s1, n1, _ = case.query.shape
        s2 = case.key.shape[1]
        lens_q, lens_kv = list(range(s1, s1 * b + 1, s1)), list(range(s2, s2 * b + 1, s2))
        q, k, v = (x.reshape(-1, *x.shape[2:]) for x in (case.query, case.key, case.value))
        qr = None if case.query_rope is None else case.query_rope.reshape(-1, *case.query_rope.shape[2:])
        kr = None if case.key_rope is None else case.key_rope.reshape(-1, *case.key_rope.shape[2:])
        idx = case.sparse_indices.reshape(-1, *case.sparse_indices.shape[2:])
    else:
        lens_q, lens_kv = case.lens_q, case.lens_kv
        q, k, v, qr, kr, idx = case.query, case.key, case.value, case.query_rope, case.key_rope, case.sparse_indices
    qf = q if qr is None else np.concatenate([q, qr], -1)
    kf = k if kr is None else np.concatenate([k, kr], -1)
    t1, n1 = q.shape[:2]
    n2 = k.shape[1]
    grp = n1 // n2
    count = np.zeros((t1, n2, k.shape[0]))
    cq, ckv = [0, *lens_q], [0, *lens_kv]
    bs = case.sparse_block_size
    for bi in range(len(lens_q)):
        s1_len, s2_len = cq[bi + 1] - cq[bi], ckv[bi + 1] - ckv[bi]
        for s1 in range(s1_len):
            t = cq[bi] + s1
            for g in range(n2):
                for blk in idx[t, g]:
                    if blk < 0:
                        continue
                    for s2 in range(blk * bs, min(blk * bs + bs, s2_len)):
                        if case.sparse_mode == 0 or s2 <= s1 + s2_len - s1_len:
                            count[t, g, ckv[bi] + s2] += 1
    out = np.zeros((t1, n1, v.shape[-1]))
    lse = np.full((t1, n1), -np.inf)
    for t in range(t1):
        for h in range(n1):
            g = h // grp
            c = count[t, g]
            if c.sum() == 0:
                continue
            s = case.scale_value * kf[:, g] @ qf[t, h]
            m = s[c > 0].max()
            w = c * np.exp(s - m)
            out[t, h] = w @ v[:, g] / w.sum()
            lse[t, h] = m + np.log(w.sum())
    return out, lse


@pytest.mark.parametrize("layout,bs,mode,n2", [("TND", 1, 3, 1), ("TND", 4, 3, 1), ("BSND", 3, 0, 1),
                                                ("BSND", 2, 3, 2)])
def test_reference_forward_matches_dense(layout: str, bs: int, mode: int, n2: int) -> None:
    rng = np.random.default_rng(0)
    case = make_case(rng, layout=layout, lens_q=[4, 1, 6], lens_kv=[9, 3, 5], n2=n2, bs=bs, mode=mode,
                     pattern="mixed")
    out, smax, ssum = sparse_flash_attention(case.query, case.key, case.value, case.sparse_indices,
                                             case.query_rope, case.key_rope, case.lens_q, case.lens_kv,
                                             **case.attrs())
    dense_out, lse = _dense(case)
    np.testing.assert_allclose(out.reshape(dense_out.shape), dense_out, atol=1e-12)
    grp = case.query.shape[-2] // n2
    # statistics -> per (t, h) log-sum-exp, in [N2, T1, G] (TND) or [B, N2, S1, G] (BSND)
    if layout == "BSND":
        lse_k = (smax + np.log(np.where(ssum > 0, ssum, 1))).transpose(0, 2, 1, 3).reshape(-1, n2 * grp)
        empty = (ssum == 0).transpose(0, 2, 1, 3).reshape(-1, n2 * grp)
    else:
        lse_k = (smax + np.log(np.where(ssum > 0, ssum, 1))).transpose(1, 0, 2).reshape(-1, n2 * grp)
        empty = (ssum == 0).transpose(1, 0, 2).reshape(-1, n2 * grp)
    np.testing.assert_array_equal(empty, np.isinf(lse))
    np.testing.assert_allclose(lse_k[~empty], lse[~empty], atol=1e-12)
    assert (smax.reshape(-1)[ssum.reshape(-1) == 0] == 0).all(), "rows without a visible key: statistics 0 / 0"


@pytest.mark.parametrize("layout,bs,rope", [("TND", 1, True), ("TND", 3, False), ("BSND", 2, True)])
def test_reference_backward_matches_finite_differences(layout: str, bs: int, rope: bool) -> None:
    rng = np.random.default_rng(1)
    case = make_case(rng, layout=layout, lens_q=[3, 4], lens_kv=[6, 4], batch=2, s1=3, s2=5, n1=2, d=5,
                     dr=3 if rope else None, k=4, bs=bs)
    w = rng.standard_normal(case.query.shape[:-1] + (case.value.shape[-1],))

    def loss(q: np.ndarray, k: np.ndarray, v: np.ndarray, qr: np.ndarray | None, kr: np.ndarray | None) -> float:
        out, _, _ = sparse_flash_attention(q, k, v, case.sparse_indices, qr, kr, case.lens_q, case.lens_kv,
                                           **case.attrs())
        return float((out * w).sum())

    args = [case.query, case.key, case.value, case.query_rope, case.key_rope]
    out, smax, ssum = sparse_flash_attention(*args[:3], case.sparse_indices, *args[3:], case.lens_q, case.lens_kv,
                                             **case.attrs())
    grads = sparse_flash_attention_grad(case.query, case.key, case.value, case.sparse_indices, w, out, smax, ssum,
                                        case.lens_q, case.lens_kv, case.query_rope, case.key_rope, **case.attrs())
    eps = 1e-6
    for i, (x, g) in enumerate(zip(args, grads)):
        if x is None:
            assert g is None
            continue
        num = np.zeros_like(x)
        for pos in np.ndindex(x.shape):
            xp, xm = x.copy(), x.copy()
            xp[pos] += eps
            xm[pos] -= eps
            a_p, a_m = list(args), list(args)
            a_p[i], a_m[i] = xp, xm
            num[pos] = (loss(*a_p) - loss(*a_m)) / (2 * eps)
        np.testing.assert_allclose(g, num, atol=1e-6, rtol=1e-5)


def test_reference_rejects_out_of_range_index() -> None:
    rng = np.random.default_rng(2)
    case = make_case(rng, layout="TND", lens_q=[3], lens_kv=[4], k=2)
    case.sparse_indices[1, 0, 0] = 4
    with pytest.raises(ValueError, match="out of range"):
        sparse_flash_attention(case.query, case.key, case.value, case.sparse_indices, None, None, case.lens_q,
                               case.lens_kv, **case.attrs())
