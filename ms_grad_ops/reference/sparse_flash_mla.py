"""Float64 reference of ``sparse_flash_mla`` and ``sparse_flash_mla_grad`` (docs/contract.md section 8).

DeepSeek-V4's sparse attention as its ``sparse_attn`` defines it (one softmax over the selected keys of a
row plus a per-head sink logit in the denominator only; keys are values) with the key sets of CANN's
SparseFlashMla golden: the band of original tokens ``[thr - 1 - ori_win_left, thr + ori_win_right)``,
``thr = S2 - S1 + t + 1``, and the compressed entries ``j < floor((L - S1 + t + 1) / cmp_ratio)``,
``L = S3 * cmp_ratio + residual`` (or S2 without ``cmp_residual_kv``). Plain loops over rows, NumPy per row;
for small test shapes. Lengths are CANN's: ``cu_seqlens_*`` cumulative with the leading 0 (TND),
``seqused_*`` per batch (rows beyond are padding: never read, zero output, lse 0).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ._common import f64

Ints = Sequence[int] | np.ndarray | None


@dataclass(frozen=True)
class Row:
    """One query row of a batch: its flat position, batch, local position, and per key group the keys it sees:
    flat original rows and flat compressed rows in list order, with the index slot of each (-1: band/HCA)."""

    t: int
    b: int
    s: int
    ori: list[tuple[np.ndarray, np.ndarray]]
    cmp: list[tuple[np.ndarray, np.ndarray]]


def _ints(x: Ints) -> list[int] | None:
    return None if x is None else [int(v) for v in np.asarray(x).reshape(-1)]


def _flat(layout: str, a: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return None
    a = f64(a) if np.asarray(a).dtype.kind == "f" else np.asarray(a)
    return a.reshape(a.shape[0] * a.shape[1], *a.shape[2:]) if layout == "BSND" else a


def _sources(layout: str, n: int, batches: int, padded: int, cu: list[int] | None,
             used: list[int] | None) -> list[tuple[int, int]]:
    """(start, rows) per batch of one source."""
    if layout == "BSND":
        starts = [(b * padded, padded) for b in range(batches)]
    elif cu is None:
        starts = [(0, n)]
    else:
        starts = [(cu[b], cu[b + 1] - cu[b]) for b in range(batches)]
    return [(s0, avail if used is None else used[b]) for b, (s0, avail) in enumerate(starts)]


def rows(query: np.ndarray, ori_kv: np.ndarray, cmp_kv: np.ndarray | None, ori_sparse_indices: np.ndarray | None,
         cmp_sparse_indices: np.ndarray | None, cu_seqlens_q: Ints, cu_seqlens_ori_kv: Ints, cu_seqlens_cmp_kv: Ints,
         seqused_q: Ints, seqused_ori_kv: Ints, seqused_cmp_kv: Ints, cmp_residual_kv: Ints, *, cmp_ratio: int,
         ori_mask_mode: int, cmp_mask_mode: int, ori_win_left: int, ori_win_right: int, layout: str) -> Iterator[Row]:
    """Every query row of a batch with the keys it sees (docs/contract.md section 8)."""
    bsnd = layout == "BSND"
    n2 = ori_kv.shape[-2]
    cu_q, cu_o, cu_c = _ints(cu_seqlens_q), _ints(cu_seqlens_ori_kv), _ints(cu_seqlens_cmp_kv)
    nb = query.shape[0] if bsnd else (len(cu_q) - 1 if cu_q is not None else 1)
    tok = (lambda a: a.shape[0] * a.shape[1]) if bsnd else (lambda a: a.shape[0])
    qs = _sources(layout, tok(query), nb, query.shape[1] if bsnd else 0, cu_q, _ints(seqused_q))
    os_ = _sources(layout, tok(ori_kv), nb, ori_kv.shape[1] if bsnd else 0, cu_o, _ints(seqused_ori_kv))
    cs = ([(0, 0)] * nb if cmp_kv is None else
          _sources(layout, tok(cmp_kv), nb, cmp_kv.shape[1] if bsnd else 0, cu_c, _ints(seqused_cmp_kv)))
    res = _ints(cmp_residual_kv)
    oidx, cidx = _flat(layout, ori_sparse_indices), _flat(layout, cmp_sparse_indices)
    for b in range(nb):
        (q0, s1), (o0, s2), (c0, s3) = qs[b], os_[b], cs[b]
        big_l = s2 if res is None else s3 * cmp_ratio + res[b]
        for s in range(s1):
            thr = s2 - s1 + s + 1
            lo, hi = 0, s2
            if ori_mask_mode == 3:
                hi = min(thr, s2)
            elif ori_mask_mode == 4:
                lo = 0 if ori_win_left == -1 else max(thr - 1 - ori_win_left, 0)
                hi = s2 if ori_win_right == -1 else min(thr + ori_win_right, s2)
            climit = s3 if cmp_mask_mode == 0 else min(max((big_l - s1 + s + 1), 0) // cmp_ratio, s3)
            ori, cmp = [], []
            for g in range(n2):
                if oidx is None:
                    j = np.arange(lo, max(hi, lo))
                    slots = np.full(j.size, -1)
                else:
                    sel = np.asarray(oidx[q0 + s, g]).reshape(-1)
                    if ((sel < -1) | (sel >= s2)).any():
                        raise IndexError(f"ori_sparse_indices out of range [-1, {s2}) in batch {b}")
                    slots = np.flatnonzero((sel >= lo) & (sel < hi))
                    j = sel[slots]
                ori.append((o0 + j.astype(np.int64), slots))
                if cmp_kv is None:
                    cmp.append((np.zeros(0, np.int64), np.zeros(0, np.int64)))
                    continue
                if cidx is None:
                    j = np.arange(climit)
                    slots = np.full(j.size, -1)
                else:
                    sel = np.asarray(cidx[q0 + s, g]).reshape(-1)
                    if ((sel < -1) | (sel >= s3)).any():
                        raise IndexError(f"cmp_sparse_indices out of range [-1, {s3}) in batch {b}")
                    slots = np.flatnonzero((sel >= 0) & (sel < climit))
                    j = sel[slots]
                cmp.append((c0 + j.astype(np.int64), slots))
            yield Row(q0 + s, b, s, ori, cmp)


def _lse_index(layout: str, row: Row, g: int) -> tuple:
    return (row.b, g, row.s) if layout == "BSND" else (g, row.t)


def _sinks(sinks: np.ndarray | None, n1: int) -> np.ndarray:
    return np.full(n1, -np.inf) if sinks is None else f64(sinks).reshape(n1)


def _lse_shape(layout: str, query: np.ndarray, n2: int) -> tuple:
    n1 = query.shape[-2]
    return (query.shape[0], n2, query.shape[1], n1 // n2) if layout == "BSND" else (n2, query.shape[0], n1 // n2)


def sparse_flash_mla(query: np.ndarray, ori_kv: np.ndarray, cmp_kv: np.ndarray | None = None,
                     ori_sparse_indices: np.ndarray | None = None, cmp_sparse_indices: np.ndarray | None = None,
                     cu_seqlens_q: Ints = None, cu_seqlens_ori_kv: Ints = None, cu_seqlens_cmp_kv: Ints = None,
                     seqused_q: Ints = None, seqused_ori_kv: Ints = None, seqused_cmp_kv: Ints = None,
                     cmp_residual_kv: Ints = None, sinks: np.ndarray | None = None, *, softmax_scale: float = 1.0,
                     cmp_ratio: int = 1, ori_mask_mode: int = 4, cmp_mask_mode: int = 3, ori_win_left: int = 127,
                     ori_win_right: int = 0, layout: str = "BSND", terms: bool = False
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Forward: ``(attn_out, softmax_lse)`` in float64; the lse includes the sink (a row without keys: the sink's
    logit, -inf without sinks; a padding row: 0). ``terms=True``: ``attn_out`` is ``sum_j P_j |kv_j|``, the size of
    the terms that make each element (for condition-aware comparisons)."""
    q, o_kv, c_kv = _flat(layout, query), _flat(layout, ori_kv), _flat(layout, cmp_kv)
    n1, n2 = q.shape[1], o_kv.shape[1]
    grp = n1 // n2
    sig = _sinks(sinks, n1)
    out = np.zeros_like(q)
    lse = np.zeros(_lse_shape(layout, query, n2))
    for row in rows(query, ori_kv, cmp_kv, ori_sparse_indices, cmp_sparse_indices, cu_seqlens_q, cu_seqlens_ori_kv,
                    cu_seqlens_cmp_kv, seqused_q, seqused_ori_kv, seqused_cmp_kv, cmp_residual_kv,
                    cmp_ratio=cmp_ratio, ori_mask_mode=ori_mask_mode, cmp_mask_mode=cmp_mask_mode,
                    ori_win_left=ori_win_left, ori_win_right=ori_win_right, layout=layout):
        for g in range(n2):
            heads = slice(g * grp, (g + 1) * grp)
            kv = np.concatenate([o_kv[row.ori[g][0], g], np.zeros((0, q.shape[-1])) if c_kv is None
                                 else c_kv[row.cmp[g][0], g]])
            logits = np.concatenate([softmax_scale * q[row.t, heads] @ kv.T, sig[heads, None]], axis=1)
            m = logits.max(axis=1, keepdims=True)
            with np.errstate(invalid="ignore", divide="ignore"):
                e = np.where(np.isneginf(logits), 0.0, np.exp(logits - m))
                total = e.sum(axis=1)
                lse[_lse_index(layout, row, g)] = np.where(total > 0, m[:, 0] + np.log(total), -np.inf)
                p = np.where(total[:, None] > 0, e[:, :-1] / np.where(total > 0, total, 1.0)[:, None], 0.0)
            out[row.t, heads] = p @ (np.abs(kv) if terms else kv)
    return out.reshape(query.shape), lse


def sparse_flash_mla_grad(query: np.ndarray, d_out: np.ndarray, out: np.ndarray, softmax_lse: np.ndarray,
                          ori_kv: np.ndarray, cmp_kv: np.ndarray | None = None,
                          ori_sparse_indices: np.ndarray | None = None, cmp_sparse_indices: np.ndarray | None = None,
                          cu_seqlens_q: Ints = None, cu_seqlens_ori_kv: Ints = None, cu_seqlens_cmp_kv: Ints = None,
                          seqused_q: Ints = None, seqused_ori_kv: Ints = None, seqused_cmp_kv: Ints = None,
                          cmp_residual_kv: Ints = None, sinks: np.ndarray | None = None, *,
                          softmax_scale: float = 1.0, cmp_ratio: int = 1, ori_mask_mode: int = 4,
                          cmp_mask_mode: int = 3, ori_win_left: int = 127, ori_win_right: int = 0,
                          layout: str = "BSND", terms: bool = False) -> tuple[np.ndarray | None, ...]:
    """Backward in float64 with P recomputed from the given lse and delta = d_out . out: ``(d_query, d_ori_kv,
    d_cmp_kv, d_sinks, ori_softmax_l1_norm, cmp_softmax_l1_norm)`` (None where the input is absent).
    ``terms=True``: each gradient is the sum of the absolute values of the terms that make it (every factor by
    its absolute value, delta's terms added), the l1 norms unchanged (sums of positive terms)."""
    q, do, o = _flat(layout, query), _flat(layout, d_out), _flat(layout, out)
    o_kv, c_kv = _flat(layout, ori_kv), _flat(layout, cmp_kv)
    lse = f64(softmax_lse)
    n1, n2 = q.shape[1], o_kv.shape[1]
    grp = n1 // n2
    sig = _sinks(sinks, n1)
    dq, d_ori = np.zeros_like(q), np.zeros_like(o_kv)
    d_cmp = None if c_kv is None else np.zeros_like(c_kv)
    d_sinks = np.zeros(n1)
    l1 = [None if x is None else np.zeros(_flat(layout, x).shape) for x in (ori_sparse_indices, cmp_sparse_indices)]
    for row in rows(query, ori_kv, cmp_kv, ori_sparse_indices, cmp_sparse_indices, cu_seqlens_q, cu_seqlens_ori_kv,
                    cu_seqlens_cmp_kv, seqused_q, seqused_ori_kv, seqused_cmp_kv, cmp_residual_kv,
                    cmp_ratio=cmp_ratio, ori_mask_mode=ori_mask_mode, cmp_mask_mode=cmp_mask_mode,
                    ori_win_left=ori_win_left, ori_win_right=ori_win_right, layout=layout):
        for g in range(n2):
            heads = slice(g * grp, (g + 1) * grp)
            jo, jc = row.ori[g][0], row.cmp[g][0]
            if jo.size + jc.size == 0:
                continue
            kv = np.concatenate([o_kv[jo, g], np.zeros((0, q.shape[-1])) if c_kv is None else c_kv[jc, g]])
            m = lse[_lse_index(layout, row, g)][:, None]
            p = np.exp(softmax_scale * q[row.t, heads] @ kv.T - m)           # [G, n]
            a = np.abs if terms else (lambda x: x)
            delta = (a(do[row.t, heads]) * a(o[row.t, heads])).sum(axis=1, keepdims=True)
            ds = p * (a(do[row.t, heads]) @ a(kv).T + (delta if terms else -delta))
            d_sinks[heads] -= (-1 if terms else 1) * np.exp(sig[heads] - m[:, 0]) * delta[:, 0]
            dq[row.t, heads] = softmax_scale * ds @ a(kv)
            dkv = softmax_scale * ds.T @ a(q[row.t, heads]) + p.T @ a(do[row.t, heads])
            np.add.at(d_ori[:, g], jo, dkv[:jo.size])
            if d_cmp is not None:
                np.add.at(d_cmp[:, g], jc, dkv[jo.size:])
            mean = p.mean(axis=0)
            for src, (slots, part) in enumerate(((row.ori[g][1], mean[:jo.size]), (row.cmp[g][1], mean[jo.size:]))):
                if l1[src] is not None:
                    l1[src][row.t, g, slots] = part
    def back(x: np.ndarray | None, like: np.ndarray | None) -> np.ndarray | None:
        return None if x is None else x.reshape(np.asarray(like).shape)

    return (back(dq, query), back(d_ori, ori_kv), back(d_cmp, cmp_kv), None if sinks is None else d_sinks,
            back(l1[0], ori_sparse_indices), back(l1[1], cmp_sparse_indices))
