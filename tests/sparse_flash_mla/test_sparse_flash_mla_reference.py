"""The float64 reference of sparse_flash_mla (per-row key lists) against a second, dense definition: DeepSeek-V4's
sparse_attn as a masked softmax over all original and compressed keys of a sequence at once, with CANN's golden
masks written as matrices (selection counts per (row, key)) and the sink as one more logit; its gradients
against central differences of that definition."""
from __future__ import annotations

import numpy as np
import pytest
from _smla_cases import SmlaCase, make_case

from ms_grad_ops import reference as ref

CASES = {
    "csa_tnd": dict(layout="TND", lens=[(9, 9), (5, 13), (3, 3)], kind="csa", n1=4, k=6, ratio=2),
    "hca_bsnd_n2": dict(layout="BSND", lens=[(7, 11), (4, 4)], kind="hca", n1=4, n2=2, ratio=3, win_left=-1),
    "swa": dict(layout="TND", lens=[(6, 3), (4, 8)], kind="swa", n1=2, win_left=2),
    "ori_idx_masks": dict(layout="TND", lens=[(8, 12)], kind="csa", n1=2, k=5, ratio=4, ori_k=7, residual=False,
                          ori_mask_mode=3, cmp_mask_mode=0),
    "band_right": dict(layout="BSND", lens=[(7, 7)], kind="hca", n1=2, ratio=2, win_left=1, win_right=2),
    "tnd_seqused": dict(layout="TND", lens=[(6, 10), (4, 4)], kind="csa", n1=2, k=4, ratio=2, pad=2),
}


def _batches(case: SmlaCase) -> list[tuple[slice, slice, slice]]:
    """Flat (query, ori, cmp) row slices each batch uses."""
    return [tuple(slice(s0[i], s0[i] + n[i]) for i in range(3)) for s0, n in zip(case.starts, case.lens)]


def _counts(case: SmlaCase, b: int, n2: int) -> tuple[np.ndarray, np.ndarray]:
    """Per key group: how often row t selects original key j / compressed entry j ([n2, S1, S2], [n2, S1, S3])."""
    s1, s2, s3 = case.lens[b]
    a, ints = case.attrs, case.ints
    ratio, wl, wr = a["cmp_ratio"], a["ori_win_left"], a["ori_win_right"]
    q_rows = _batches(case)[b][0]
    def flat(x: np.ndarray | None) -> np.ndarray | None:
        return None if x is None else x.reshape(-1, *x.shape[-2:])

    oidx, cidx = flat(ints["ori_sparse_indices"]), flat(ints["cmp_sparse_indices"])
    res = ints["cmp_residual_kv"]
    big_l = s2 if res is None else s3 * ratio + int(res[b])
    t = np.arange(s1)[:, None]
    thr = s2 - s1 + t + 1
    j = np.arange(s2)[None, :]
    if a["ori_mask_mode"] == 4:
        band = (j >= (thr - 1 - wl if wl >= 0 else -1)) & (j < (thr + wr if wr >= 0 else s2 + 1))
    elif a["ori_mask_mode"] == 3:
        band = j < thr
    else:
        band = np.ones((s1, s2), bool)
    c = np.arange(s3)[None, :]
    cvis = (c < (np.maximum(big_l - s1 + t + 1, 0) // ratio)) if a["cmp_mask_mode"] == 3 else np.ones((s1, s3), bool)
    c_ori, c_cmp = np.zeros((n2, s1, s2)), np.zeros((n2, s1, s3))
    for g in range(n2):
        if oidx is None:
            c_ori[g] = band
        else:
            for r in range(s1):
                for v in oidx[q_rows.start + r, g]:
                    if v >= 0:
                        c_ori[g, r, v] += band[r, v]
        if cidx is None:
            c_cmp[g] = cvis
        else:
            for r in range(s1):
                for v in cidx[q_rows.start + r, g]:
                    if v >= 0:
                        c_cmp[g, r, v] += cvis[r, v]
    return c_ori, c_cmp


def dense(case: SmlaCase, q: np.ndarray, ori: np.ndarray, cmp: np.ndarray | None, sinks: np.ndarray | None
          ) -> tuple[np.ndarray, np.ndarray, list]:
    """(out [T1, N1, D], lse [T1, N1] with -inf/0 conventions, P per batch and group) of the dense definition."""
    n1, n2 = q.shape[-2], ori.shape[-2]
    g_size = n1 // n2
    qf, of = q.reshape(-1, n1, q.shape[-1]), ori.reshape(-1, n2, ori.shape[-1])
    cf = None if cmp is None else cmp.reshape(-1, n2, cmp.shape[-1])
    sig = np.full(n1, -np.inf) if sinks is None else sinks.astype(np.float64)
    out, lse, probs = np.zeros_like(qf), np.zeros(qf.shape[:2]), []
    for b, (qs, os_, cs) in enumerate(_batches(case)):
        c_ori, c_cmp = _counts(case, b, n2)
        for g in range(n2):
            heads = slice(g * g_size, (g + 1) * g_size)
            kv = np.concatenate([of[os_, g], np.zeros((0, q.shape[-1])) if cf is None else cf[cs, g]])
            w = np.concatenate([c_ori[g], c_cmp[g]], axis=1)                      # [S1, keys]
            z = case.attrs["softmax_scale"] * np.einsum("thd,kd->thk", qf[qs, heads], kv)
            e = w[:, None, :] * np.exp(z)                                        # multiplicity-weighted
            total = e.sum(-1) + np.exp(sig[heads])[None, :]
            p = e / total[..., None]
            out[qs, heads] = np.einsum("thk,kd->thd", p, kv)
            lse[qs, heads] = np.log(total)
            probs.append((b, g, p, c_ori[g].shape[1]))
    return out, lse, probs


def _lse_flat(case: SmlaCase, lse: np.ndarray) -> np.ndarray:
    """The reference's [N2, T1, G] / [B, N2, S1, G] lse as [T1, N1]."""
    if case.layout == "BSND":
        b, n2, s1, g = lse.shape
        return lse.transpose(0, 2, 1, 3).reshape(b * s1, n2 * g)
    n2, t1, g = lse.shape
    return lse.transpose(1, 0, 2).reshape(t1, n2 * g)


def _rows_of_batches(case: SmlaCase) -> np.ndarray:
    return np.concatenate([np.arange(qs.start, qs.stop) for qs, _, _ in _batches(case)]).astype(int)


@pytest.mark.parametrize("name", list(CASES))
def test_reference_forward_matches_the_dense_definition(name: str) -> None:
    case = make_case(np.random.default_rng(4), **CASES[name])
    a = case.arrays
    out, lse = ref.sparse_flash_mla(a["query"], a["ori_kv"], **case.kwargs(), **case.attrs)
    d_out, d_lse, _ = dense(case, a["query"], a["ori_kv"], a["cmp_kv"], a["sinks"])
    rows = _rows_of_batches(case)
    np.testing.assert_allclose(out.reshape(d_out.shape)[rows], d_out[rows], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_lse_flat(case, lse)[rows], d_lse[rows], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["csa_tnd", "hca_bsnd_n2", "ori_idx_masks"])
def test_reference_grad_matches_central_differences(name: str) -> None:
    case = make_case(np.random.default_rng(5), **{**CASES[name], "d": 4})
    a = dict(case.arrays)
    if a["sinks"] is not None:
        a["sinks"] = a["sinks"].astype(np.float64)
    rng = np.random.default_rng(6)
    w = rng.standard_normal(a["query"].shape)
    rows = _rows_of_batches(case)
    mask = np.zeros(w.reshape(-1, *w.shape[-2:]).shape[0], bool)
    mask[rows] = True

    def loss(**over: np.ndarray) -> float:
        x = {**a, **over}
        out = dense(case, x["query"], x["ori_kv"], x["cmp_kv"], x["sinks"])[0]
        return float((out[mask] * w.reshape(out.shape)[mask]).sum())

    out, lse = ref.sparse_flash_mla(a["query"], a["ori_kv"], **{**case.kwargs(), "sinks": a["sinks"]}, **case.attrs)
    got = ref.sparse_flash_mla_grad(a["query"], w, out, lse, a["ori_kv"], **{**case.kwargs(), "sinks": a["sinks"]},
                                    **case.attrs)
    for name_, k in (("query", 0), ("ori_kv", 1), ("cmp_kv", 2), ("sinks", 3)):
        if a[name_] is None:
            assert got[k] is None
            continue
        x = a[name_]
        num = np.zeros_like(x)
        for i in rng.choice(x.size, size=min(x.size, 40), replace=False):
            e = np.zeros(x.size)
            e[i] = 1e-6
            e = e.reshape(x.shape)
            num.flat[i] = (loss(**{name_: x + e}) - loss(**{name_: x - e})) / 2e-6
            np.testing.assert_allclose(got[k].flat[i], num.flat[i], rtol=1e-5, atol=1e-7, err_msg=f"{name_}[{i}]")


def test_l1_norms_are_the_dense_head_mean() -> None:
    case = make_case(np.random.default_rng(8), **CASES["ori_idx_masks"])
    a = case.arrays
    out, lse = ref.sparse_flash_mla(a["query"], a["ori_kv"], **case.kwargs(), **case.attrs)
    got = ref.sparse_flash_mla_grad(a["query"], np.ones_like(out), out, lse, a["ori_kv"], **case.kwargs(),
                                    **case.attrs)
    _, _, probs = dense(case, a["query"], a["ori_kv"], a["cmp_kv"], a["sinks"])
    (b, g, p, s2), = probs
    qs, _, _ = _batches(case)[b]
    c_ori, c_cmp = _counts(case, b, 1)
    for src, (idx, l1) in enumerate(((case.ints["ori_sparse_indices"], got[4]),
                                     (case.ints["cmp_sparse_indices"], got[5]))):
        counts = (c_ori, c_cmp)[src][g]
        for r in range(qs.stop - qs.start):
            for slot, v in enumerate(idx[qs.start + r, g]):
                if v < 0 or counts[r, v] == 0:
                    assert l1[qs.start + r, g, slot] == 0
                    continue
                key = v if src == 0 else s2 + v
                # the dense P of a key selected c times is c times one selection's probability
                want = p[r, :, key].mean() / counts[r, v]
                np.testing.assert_allclose(l1[qs.start + r, g, slot], want, rtol=1e-12)
