"""Float64 references of ``lightning_indexer``, its value gradient ``lightning_indexer_grad`` and
``sparse_lightning_indexer_grad_kl_loss`` (docs/contract.md section 4), plus the main-attention softmax
statistics (docs/contract.md section 3) that feed the indexer's teacher distribution.

Shapes (TND; BSND adds B, S):
    query ``[T1, N1, D]``, key ``[T2, 1, D]``, query_rope ``[T1, N1, Dr]``, key_rope ``[T2, 1, Dr]``,
    query_index ``[T1, Nidx, Didx]``, key_index ``[T2, 1, Didx]``, weights ``[T1, Nidx]``,
    sparse_indices ``[T1, 1, K]`` (token indices local to the batch, ``-1`` = unused),
    softmax_max/softmax_sum ``[1, T1, N1]`` (BSND ``[B, 1, S1, N1]``).
Lengths (docs/contract.md section 0.3): cumulative in TND (CANN: ``[3, 5]`` is written ``[3, 8]``), per
batch in BSND (the valid rows of each padded batch row; the others are padding).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._common import batches, f64

LOG_FLOOR = 1e-8


@dataclass(frozen=True)
class _Rows:
    """Per query row: its batch's key offset, key count S2_b and causal limit (exclusive); a BSND
    padding row (beyond its batch's query length) is not ``active``: it sees no key and its
    ``sparse_indices`` are never read."""

    key_base: np.ndarray
    key_count: np.ndarray
    limit: np.ndarray
    active: np.ndarray


def _residuals(cmp_residual_k: object, count: int, cmp_ratio: int) -> list[int]:
    """Per batch, the original tokens of the last incomplete compression block (all 0 for None)."""
    if cmp_residual_k is None:
        return [0] * count
    res = [int(x) for x in np.asarray(cmp_residual_k).reshape(-1)]
    if len(res) != count or any(not 0 <= r < cmp_ratio for r in res):
        raise ValueError(f"cmp_residual_k {res}: one value in [0, {cmp_ratio}) per batch ({count}) expected")
    return res


def _rows(t1: int, bounds: list[tuple[int, int, int, int]], sparse_mode: int, cmp_ratio: int = 1,
          cmp_residual_k: object = None) -> _Rows:
    """With sparse_mode 3, local query i of a batch sees the (compressed) keys
    ``j < floor((S2 * cmp_ratio + residual - S1 + i + 1) / cmp_ratio)`` (docs/contract.md section 9.1;
    cmp_ratio 1, residual 0: the right-down causal rule of section 0.4)."""
    base = np.zeros(t1, np.int64)
    count = np.zeros(t1, np.int64)
    limit = np.zeros(t1, np.int64)
    active = np.zeros(t1, bool)
    for (q0, s1, k0, s2), res in zip(bounds, _residuals(cmp_residual_k, len(bounds), cmp_ratio)):
        rows = np.arange(q0, q0 + s1)
        base[rows], count[rows], active[rows] = k0, s2, True
        local = rows - q0
        seen = s2 * cmp_ratio + res - s1 + local + 1
        limit[rows] = np.clip(np.maximum(seen, 0) // cmp_ratio, 0, s2) if sparse_mode == 3 else s2
    return _Rows(base, count, limit, active)


def _to_tnd(layout: str, *arrays: np.ndarray | None) -> list[np.ndarray | None]:
    """BSND tensors flattened to TND (``[B, S, ...] -> [B*S, ...]``), TND passed through."""
    if layout == "TND":
        return list(arrays)
    return [None if a is None else a.reshape((-1,) + a.shape[2:]) for a in arrays]


def _visible_slots(rows: _Rows, sparse_indices: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
    """(slot numbers, global key rows) of the visible selected keys of query row t, in slot order.
    ``-1`` slots and keys the mask hides are skipped; an index ``< -1`` or ``>= S2_b`` raises. A
    padding row has none (its indices are not read)."""
    if not rows.active[t]:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    idx = np.asarray(sparse_indices[t]).reshape(-1).astype(np.int64)
    if np.any(idx < -1):
        raise IndexError(f"sparse index below -1 in row {t}")
    if np.any(idx >= rows.key_count[t]):
        raise IndexError(f"sparse index out of range for row {t}")
    slots = np.flatnonzero((idx >= 0) & (idx < rows.limit[t]))
    return slots, rows.key_base[t] + idx[slots]


def _visible(rows: _Rows, sparse_indices: np.ndarray, t: int) -> np.ndarray:
    """Global key rows of the visible selected keys of query row t, in slot order."""
    return _visible_slots(rows, sparse_indices, t)[1]


def _score_backward(qt: np.ndarray, kt: np.ndarray, wt: np.ndarray, sx: np.ndarray, d_i: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Backward of ``I_j = sum_g w_g relu(Sx[g, j])`` for one query row, ``Sx = qt @ kt.T``:
    (d_weights ``[Nidx]``, d_query_index ``[Nidx, Didx]``, per-key d_key_index ``[n, Didx]``).
    The ReLU's step ``[Sx > 0]`` is NaN where Sx is NaN (IEEE: a comparison would give 0 and drop it)."""
    step = np.where(np.isnan(sx), np.nan, sx > 0)
    ds = d_i[None, :] * wt[:, None] * step
    return np.maximum(sx, 0.0) @ d_i, ds @ kt, ds.T @ qt


def score_backward_terms(qt: np.ndarray, kt: np.ndarray, wt: np.ndarray, sx: np.ndarray, d_i: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_score_backward` over the absolute values of ``qt``, ``kt``, ``wt`` and ``d_i`` (the ReLU's
    mask still from the signed ``sx``): the sum of the absolute values of each gradient's terms."""
    return _score_backward(np.abs(qt), np.abs(kt), np.abs(wt), sx, np.abs(d_i))


def _prepare(layout: str, query_index: np.ndarray, key_index: np.ndarray, cum_q: object, cum_k: object,
             sparse_mode: int, cmp_ratio: int = 1, cmp_residual_k: object = None) -> tuple[int, _Rows]:
    """T1 (B * S1 in BSND) and the row plan of the lengths rule (docs/contract.md section 0.3) and
    of compressed keys (section 9.1)."""
    if layout == "BSND":
        b, s1, s2 = query_index.shape[0], query_index.shape[1], key_index.shape[1]
        t1, bounds = b * s1, batches(layout, b, s1, s2, cum_q, cum_k)
    else:
        t1 = query_index.shape[0]
        bounds = batches(layout, 0, t1, key_index.shape[0], cum_q, cum_k)
    return t1, _rows(t1, bounds, sparse_mode, cmp_ratio, cmp_residual_k)


def index_scores(query_index: np.ndarray, key_index: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``I_j = sum_g w_g relu(q_g . k_j)`` for one row: q ``[Nidx, Didx]``, k ``[n, Didx]``, w ``[Nidx]``."""
    return f64(weights) @ np.maximum(f64(query_index) @ f64(key_index).T, 0.0)


def lightning_indexer(query_index: np.ndarray, key_index: np.ndarray, weights: np.ndarray,
                      actual_seq_lengths_query: object = None, actual_seq_lengths_key: object = None,
                      cmp_residual_k: object = None, *, sparse_count: int, layout: str = "BSND", sparse_mode: int = 3,
                      cmp_ratio: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Top-``sparse_count`` visible keys of every query row by descending ``I`` (ties to the lower
    index); unused slots hold ``-1`` and ``-inf``. Returns (int32 indices, float64 scores) shaped
    ``[T1, 1, K]`` (BSND ``[B, S1, 1, K]``). Compressed keys: docs/contract.md section 9.1."""
    t1, rows = _prepare(layout, query_index, key_index, actual_seq_lengths_query, actual_seq_lengths_key, sparse_mode,
                        cmp_ratio, cmp_residual_k)
    qi, ki, w = _to_tnd(layout, query_index, key_index, weights)
    idx = np.full((t1, 1, sparse_count), -1, np.int32)
    val = np.full((t1, 1, sparse_count), -np.inf)
    for t in range(t1):
        n = int(rows.limit[t])
        if n == 0:
            continue
        base = int(rows.key_base[t])
        score = index_scores(qi[t], ki[base:base + n, 0], w[t])
        order = np.lexsort((np.arange(n), -score))[:sparse_count]
        idx[t, 0, :order.size] = order
        val[t, 0, :order.size] = score[order]
    if layout == "BSND":
        shape = query_index.shape[:2] + (1, sparse_count)
        return idx.reshape(shape), val.reshape(shape)
    return idx, val


def attention_softmax_stats(query: np.ndarray, key: np.ndarray, sparse_indices: np.ndarray,
                            query_rope: np.ndarray | None = None, key_rope: np.ndarray | None = None,
                            actual_seq_lengths_query: object = None, actual_seq_lengths_key: object = None,
                            sinks: np.ndarray | None = None, cmp_residual_k: object = None, *, scale_value: float,
                            layout: str = "BSND", sparse_mode: int = 3, cmp_ratio: int = 1
                            ) -> tuple[np.ndarray, np.ndarray]:
    """``softmax_max``/``softmax_sum`` of the main sparse attention (docs/contract.md section 3, block size 1)
    over the same selected keys: ``[1, T1, N1]`` (BSND ``[B, 1, S1, N1]``). Rows without a visible
    key (BSND padding rows included) get (0, 0), as ``sparse_flash_attention`` gives them. With
    ``sinks`` ([N1]) the statistics include them (docs/contract.md section 0.7): a row without a visible
    key gets (sigma, 1) for a head with sigma > -inf (a BSND padding row keeps (0, 0)). Compressed keys:
    section 9.1."""
    t1, rows = _prepare(layout, query, key, actual_seq_lengths_query, actual_seq_lengths_key, sparse_mode, cmp_ratio,
                        cmp_residual_k)
    q, k, qr, kr, si = _to_tnd(layout, query, key, query_rope, key_rope, sparse_indices)
    n1 = q.shape[1]
    sig = np.full(n1, -np.inf) if sinks is None else f64(sinks).reshape(n1)
    sink = sig > -np.inf
    mx = np.zeros((t1, n1))
    sm = np.zeros((t1, n1))
    for t in range(t1):
        j = _visible(rows, si, t)
        if j.size == 0:
            if rows.active[t]:
                mx[t], sm[t] = np.where(sink, sig, 0.0), np.where(sink, 1.0, 0.0)
            continue
        s = _logits(q, k, qr, kr, t, j, scale_value)
        mx[t] = np.maximum(s.max(axis=1), sig)
        sm[t] = np.exp(s - mx[t][:, None]).sum(axis=1) + np.exp(sig - mx[t])
    if layout == "BSND":
        b, s1 = query.shape[:2]
        return mx.reshape(b, s1, 1, n1).transpose(0, 2, 1, 3), sm.reshape(b, s1, 1, n1).transpose(0, 2, 1, 3)
    return mx[None], sm[None]


def _logits(q: np.ndarray, k: np.ndarray, qr: np.ndarray | None, kr: np.ndarray | None, t: int,
            j: np.ndarray, scale_value: float) -> np.ndarray:
    s = f64(q[t]) @ f64(k[j, 0]).T
    if qr is not None:
        s = s + f64(qr[t]) @ f64(kr[j, 0]).T
    return scale_value * s


def _stats_tnd(layout: str, stat: np.ndarray) -> np.ndarray:
    """Statistics as ``[T1, N1]``."""
    if layout == "BSND":
        return f64(stat).transpose(0, 2, 1, 3).reshape(-1, stat.shape[-1])
    return f64(stat).reshape(-1, stat.shape[-1])


def sparse_lightning_indexer_grad_kl_loss(
        query: np.ndarray, key: np.ndarray, query_index: np.ndarray, key_index: np.ndarray, weights: np.ndarray,
        sparse_indices: np.ndarray, softmax_max: np.ndarray, softmax_sum: np.ndarray,
        query_rope: np.ndarray | None = None, key_rope: np.ndarray | None = None,
        actual_seq_lengths_query: object = None, actual_seq_lengths_key: object = None,
        sinks: np.ndarray | None = None, cmp_residual_k: object = None, *, scale_value: float,
        layout: str = "BSND", sparse_mode: int = 3, cmp_ratio: int = 1, return_kl_grad: bool = False,
        terms: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """docs/contract.md section 4.2: returns (d_query_index, d_key_index, d_weights, loss) for d(loss) = 1 with
    CANN's ``dI = y - p``; the target ``p`` is the head sum over ``N1``, or with a sink > -inf the
    head sum renormalised to 1 over the row's keys (CANN's ``1 / (N1 - sum_h P_sink,h)`` for
    statistics of the same keys and sinks), in log-shifted form so that large sinks stay finite.
    ``return_kl_grad=True`` uses the exact gradient of the loss instead (``dI = y * sum(p) - p``;
    identical when ``sum(p) = 1``), for finite-difference checks. ``terms=True``: each output is the
    sum of the absolute values of its terms (``|dI| <= y + p``, :func:`score_backward_terms`; the loss
    ``sum p (|ln p| + |ln y| + 1)``, the 1 for the rounding of p and y themselves, which ``ln`` hands on
    where they are near 1), the scale of its rounding error where they cancel. Compressed keys: section 9.1."""
    t1, rows = _prepare(layout, query, key, actual_seq_lengths_query, actual_seq_lengths_key, sparse_mode, cmp_ratio,
                        cmp_residual_k)
    q, k, qr, kr, qi, ki, w, si = _to_tnd(layout, query, key, query_rope, key_rope, query_index, key_index,
                                          weights, sparse_indices)
    mx, sm = _stats_tnd(layout, softmax_max), _stats_tnd(layout, softmax_sum)
    n1 = q.shape[1]
    renormalise = sinks is not None and bool(np.any(f64(sinks) > -np.inf))
    dqi = np.zeros(qi.shape)
    dki = np.zeros(ki.shape)
    dw = np.zeros(w.shape)
    loss = 0.0
    for t in range(t1):
        j = _visible(rows, si, t)
        if j.size == 0:
            continue
        if renormalise:  # log P[h, j], shifted by its max: every P may underflow, their ratio does not
            log_p = _logits(q, k, qr, kr, t, j, scale_value) - (mx[t] + np.log(sm[t]))[:, None]
            p = np.exp(log_p - log_p.max()).sum(axis=0)
            p = p / p.sum()
        else:
            p_heads = np.exp(_logits(q, k, qr, kr, t, j, scale_value) - mx[t][:, None]) / sm[t][:, None]
            p = p_heads.sum(axis=0) / n1
        qt, kt, wt = f64(qi[t]), f64(ki[j, 0]), f64(w[t])
        sx = qt @ kt.T
        r = np.maximum(sx, 0.0)
        i_score = wt @ r
        log_y = i_score - i_score.max()
        log_y = log_y - np.log(np.exp(log_y).sum())
        y = np.exp(log_y)
        log_p, log_y = np.log(np.maximum(p, LOG_FLOOR)), np.log(np.maximum(y, LOG_FLOOR))
        loss += float(np.sum(p * (np.abs(log_p) + np.abs(log_y) + 1 if terms else log_p - log_y)))
        d_i = y * p.sum() - p if return_kl_grad else y - p
        backward = score_backward_terms if terms else _score_backward
        dw[t], dqi[t], dk = backward(qt, kt, wt, sx, y + p if terms else d_i)
        np.add.at(dki[:, 0], j, dk)
    if layout == "BSND":
        dqi = dqi.reshape(query_index.shape)
        dki = dki.reshape(key_index.shape)
        dw = dw.reshape(weights.shape)
    return dqi, dki, dw, loss


def lightning_indexer_grad(query_index: np.ndarray, key_index: np.ndarray, weights: np.ndarray,
                           sparse_indices: np.ndarray, d_values: np.ndarray,
                           actual_seq_lengths_query: object = None, actual_seq_lengths_key: object = None,
                           cmp_residual_k: object = None, *, layout: str = "BSND", sparse_mode: int = 3,
                           cmp_ratio: int = 1, terms: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradient of the selected index scores ``sparse_values[t, 0, k] = I[t, j]``,
    ``I[t, j] = sum_g weights[t, g] * relu(query_index[t, g] . key_index[j])``, ``j = sparse_indices[t, 0, k]``,
    for the incoming gradient ``d_values`` (shaped like ``sparse_indices``).

    A ``-1`` slot and a key the mask (``sparse_mode``) hides are skipped (their ``d_values`` entry is
    never read); duplicate indices each count; an index ``< -1`` or ``>= S2_b`` raises ``IndexError``.
    Returns float64 (d_query_index, d_key_index, d_weights) shaped like query_index, key_index, weights;
    with ``terms=True`` the sums of the absolute values of their terms (:func:`score_backward_terms`).
    """
    t1, rows = _prepare(layout, query_index, key_index, actual_seq_lengths_query, actual_seq_lengths_key, sparse_mode,
                        cmp_ratio, cmp_residual_k)
    qi, ki, w, si, dv = _to_tnd(layout, query_index, key_index, weights, sparse_indices, d_values)
    dqi = np.zeros(qi.shape)
    dki = np.zeros(ki.shape)
    dw = np.zeros(w.shape)
    for t in range(t1):
        slots, j = _visible_slots(rows, si, t)
        if j.size == 0:
            continue
        qt, kt, wt = f64(qi[t]), f64(ki[j, 0]), f64(w[t])
        d_i = f64(dv[t]).reshape(-1)[slots]
        dw[t], dqi[t], dk = (score_backward_terms if terms else _score_backward)(qt, kt, wt, qt @ kt.T, d_i)
        np.add.at(dki[:, 0], j, dk)
    return dqi.reshape(query_index.shape), dki.reshape(key_index.shape), dw.reshape(weights.shape)


def indexer_kl_loss(*args: np.ndarray | None, **kwargs: object) -> float:
    """The loss alone (same arguments as :func:`sparse_lightning_indexer_grad_kl_loss`)."""
    return sparse_lightning_indexer_grad_kl_loss(*args, **kwargs)[3]
