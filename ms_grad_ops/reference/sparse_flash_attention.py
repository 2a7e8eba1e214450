"""Float64 reference of ``sparse_flash_attention`` and ``sparse_flash_attention_grad`` (docs/contract.md section 3).

Plain loops over query rows and key groups with NumPy per row; meant for small test shapes.
Layouts: TND (``actual_seq_lengths_*`` cumulative, no leading 0) and BSND (lengths per batch: the
valid rows of each padded batch row, docs/contract.md section 0.3). Arrays may be any float dtype
(computed in float64); ``sparse_indices`` int. ``sinks`` (float ``[N1]``, optional): one more logit per
head in each row's softmax, unscaled, whose value is zero (docs/contract.md section 0.7).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._common import batches, f64


def _batches(layout: str, query: np.ndarray, key: np.ndarray, lens_q: Sequence[int] | None,
             lens_kv: Sequence[int] | None) -> list[tuple[int, int, int, int]]:
    """(q_start, S1_b, kv_start, S2_b) per batch, rows/keys counted in the flattened token axis."""
    if layout == "BSND":
        return batches(layout, query.shape[0], query.shape[1], key.shape[1], lens_q, lens_kv)
    return batches(layout, 0, query.shape[0], key.shape[0], lens_q, lens_kv)


def visible_keys(indices_row: np.ndarray, s1: int, s1_len: int, s2_len: int, block_size: int,
                 sparse_mode: int) -> list[int]:
    """Local key positions of one query row, in slot order (a key selected twice counts twice)."""
    limit = s2_len - 1 if sparse_mode == 0 else min(s2_len - 1, s1 + s2_len - s1_len)
    nblocks = -(-s2_len // block_size)
    keys: list[int] = []
    for idx in np.asarray(indices_row).reshape(-1).tolist():
        if idx == -1:
            continue
        if idx < -1 or idx >= nblocks:
            raise ValueError(f"sparse index {idx} out of range [-1, {nblocks})")
        keys.extend(range(idx * block_size, min((idx + 1) * block_size, limit + 1)))
    return keys


def _flat(layout: str, *arrays: np.ndarray | None) -> list[np.ndarray | None]:
    """BSND [B, S, N, X] -> [B*S, N, X] (TND unchanged); None stays None."""
    out = []
    for a in arrays:
        if a is None or layout == "TND":
            out.append(None if a is None else f64(a) if a.dtype.kind == "f" else np.asarray(a))
        else:
            arr = f64(a) if a.dtype.kind == "f" else np.asarray(a)
            out.append(arr.reshape(arr.shape[0] * arr.shape[1], *arr.shape[2:]))
    return out


def _rows(layout: str, query: np.ndarray, key: np.ndarray, sparse_indices: np.ndarray,
          lens_q: Sequence[int] | None, lens_kv: Sequence[int] | None, block_size: int, sparse_mode: int):
    """Yields (t, stats position fn args, kv_start, visible local keys per n2) for every query row."""
    n2 = key.shape[-2]
    flat_idx = _flat(layout, np.asarray(sparse_indices))[0]
    for b, (q0, s1_len, kv0, s2_len) in enumerate(_batches(layout, query, key, lens_q, lens_kv)):
        for s1 in range(s1_len):
            t = q0 + s1
            keys = [kv0 + np.asarray(visible_keys(flat_idx[t, g], s1, s1_len, s2_len, block_size, sparse_mode),
                                     dtype=np.int64) for g in range(n2)]
            yield t, b, s1, keys


def _stats_index(layout: str, b: int, s1: int, t: int, g: int) -> tuple:
    """Index of row (b, s1)/(t) of key group g in the statistics ([N2, T1, G] or [B, N2, S1, G])."""
    return (b, g, s1) if layout == "BSND" else (g, t)


def sparse_flash_attention(query: np.ndarray, key: np.ndarray, value: np.ndarray, sparse_indices: np.ndarray,
                           query_rope: np.ndarray | None = None, key_rope: np.ndarray | None = None,
                           actual_seq_lengths_query: Sequence[int] | None = None,
                           actual_seq_lengths_kv: Sequence[int] | None = None, sinks: np.ndarray | None = None, *,
                           scale_value: float, sparse_block_size: int = 1, layout: str = "BSND", sparse_mode: int = 3,
                           terms: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Forward: ``(out, softmax_max, softmax_sum)`` in float64 (statistics shaped as docs/contract.md section 3;
    with sinks they include the sink, and a row with no visible key gets max sigma, sum 1 for each head
    whose sigma > -inf). ``terms=True``: ``out`` is ``sum_j P_j |v_j|`` instead, the size of the terms
    its sum adds (the scale of its rounding error, for condition-aware comparisons)."""
    q, k, v, qr, kr = _flat(layout, query, key, value, query_rope, key_rope)
    v = np.abs(v) if terms else v
    n1, n2 = q.shape[1], k.shape[1]
    grp = n1 // n2
    qf = q if qr is None else np.concatenate([q, qr], axis=-1)
    kf = k if kr is None else np.concatenate([k, kr], axis=-1)
    out = np.zeros(q.shape[:2] + (v.shape[-1],))
    stats_shape = (query.shape[0], n2, query.shape[1], grp) if layout == "BSND" else (n2, q.shape[0], grp)
    smax = np.zeros(stats_shape)   # rows without a visible key (BSND padding rows included): 0 and 0
    ssum = np.zeros(stats_shape)
    sig = _sinks(sinks, n1)
    for t, b, s1, keys in _rows(layout, query, key, sparse_indices, actual_seq_lengths_query, actual_seq_lengths_kv,
                                sparse_block_size, sparse_mode):
        for g in range(n2):
            heads = slice(g * grp, (g + 1) * grp)
            sigma = sig[heads, None]                                     # [G, 1]
            if keys[g].size == 0:
                sink = sigma[:, 0] > -np.inf
                smax[_stats_index(layout, b, s1, t, g)] = np.where(sink, sigma[:, 0], 0.0)
                ssum[_stats_index(layout, b, s1, t, g)] = np.where(sink, 1.0, 0.0)
                continue
            s = scale_value * qf[t, heads] @ kf[keys[g], g].T          # [G, n]
            m = np.maximum(s.max(axis=1, keepdims=True), sigma)
            e = np.exp(s - m)
            l_sum = e.sum(axis=1, keepdims=True) + np.exp(sigma - m)
            out[t, heads] = (e / l_sum) @ v[keys[g], g]
            smax[_stats_index(layout, b, s1, t, g)] = m[:, 0]
            ssum[_stats_index(layout, b, s1, t, g)] = l_sum[:, 0]
    return out.reshape(query.shape[:-1] + (v.shape[-1],)), smax, ssum


def sparse_flash_attention_grad(query: np.ndarray, key: np.ndarray, value: np.ndarray, sparse_indices: np.ndarray,
                                d_out: np.ndarray, out: np.ndarray, softmax_max: np.ndarray,
                                softmax_sum: np.ndarray, actual_seq_lengths_query: Sequence[int] | None = None,
                                actual_seq_lengths_kv: Sequence[int] | None = None,
                                query_rope: np.ndarray | None = None, key_rope: np.ndarray | None = None,
                                sinks: np.ndarray | None = None, *, scale_value: float, sparse_block_size: int = 1,
                                layout: str = "BSND", sparse_mode: int = 3, terms: bool = False
                                ) -> tuple[np.ndarray | None, ...]:
    """Backward: ``(d_query, d_key, d_value, d_query_rope, d_key_rope)`` in float64, exactly the
    docs/contract.md section 3 formulas with P recomputed from the given statistics; rope grads None without rope.
    With sinks, ``d_sinks`` (``[N1]``, ``-sum over rows of P_sink * (dO . O)``) is appended.
    ``terms=True``: each gradient is the sum of the absolute values of the terms that make it
    (``|dS_j| <= P_j (|dO| . |v_j| + |dO| . |O|)``, then absolute keys, queries, ``dO``): the scale of
    its rounding error where the terms cancel, for condition-aware comparisons."""
    q, k, v, qr, kr, do, o = _flat(layout, query, key, value, query_rope, key_rope, d_out, out)
    smax, ssum = f64(softmax_max), f64(softmax_sum)
    n1, n2 = q.shape[1], k.shape[1]
    grp = n1 // n2
    d = q.shape[-1]
    qf = q if qr is None else np.concatenate([q, qr], axis=-1)
    kf = k if kr is None else np.concatenate([k, kr], axis=-1)
    dqf = np.zeros_like(qf)
    dkf = np.zeros_like(kf)
    dv = np.zeros_like(v)
    sig = _sinks(sinks, n1)
    d_sinks = np.zeros(n1)
    for t, b, s1, keys in _rows(layout, query, key, sparse_indices, actual_seq_lengths_query, actual_seq_lengths_kv,
                                sparse_block_size, sparse_mode):
        for g in range(n2):
            j = keys[g]
            if j.size == 0:
                continue
            heads = slice(g * grp, (g + 1) * grp)
            m = smax[_stats_index(layout, b, s1, t, g)][:, None]
            l_sum = ssum[_stats_index(layout, b, s1, t, g)][:, None]
            p = np.exp(scale_value * qf[t, heads] @ kf[j, g].T - m) / l_sum   # [G, n]
            # with terms: every factor by its absolute value and -delta's terms added, not subtracted
            a = np.abs if terms else (lambda x: x)
            delta = (a(do[t, heads]) * a(o[t, heads])).sum(axis=1, keepdims=True)
            dp = a(do[t, heads]) @ a(v[j, g]).T
            ds = p * (dp + delta if terms else dp - delta)
            d_sinks[heads] -= (-1 if terms else 1) * np.exp(sig[heads] - m[:, 0]) / l_sum[:, 0] * delta[:, 0]
            dqf[t, heads] = scale_value * ds @ a(kf[j, g])
            np.add.at(dkf[:, g], j, scale_value * ds.T @ a(qf[t, heads]))
            np.add.at(dv[:, g], j, p.T @ a(do[t, heads]))

    def back(x: np.ndarray, like: np.ndarray) -> np.ndarray:
        return x.reshape(like.shape)

    d_query = back(dqf[..., :d], query)
    d_key = back(dkf[..., :d], key)
    d_value = back(dv, value)
    rope = (None, None) if query_rope is None else (back(dqf[..., d:], query_rope), back(dkf[..., d:], key_rope))
    return (d_query, d_key, d_value, *rope) + (() if sinks is None else (d_sinks,))


def _sinks(sinks: np.ndarray | None, n1: int) -> np.ndarray:
    """The sink logit of every head in float64: -inf (no sink) when absent."""
    return np.full(n1, -np.inf) if sinks is None else f64(sinks).reshape(n1)
