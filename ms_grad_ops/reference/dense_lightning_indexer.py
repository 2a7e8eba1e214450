"""Float64 references of the dense warm-up pair ``dense_lightning_indexer_softmax_lse`` and
``dense_lightning_indexer_grad_kl_loss`` (docs/contract.md sections 4.3 and 4.4), plus the dense main
attention's softmax statistics that feed the teacher (every visible key, key heads N2 = 1 or N1).

Shapes (TND; BSND adds B, S): query ``[T1, N1, D]``, key ``[T2, N2, D]``, query_rope ``[T1, N1, Dr]``, key_rope
``[T2, N2, Dr]``, query_index ``[T1, Nidx, Didx]``, key_index ``[T2, 1, Didx]``, weights ``[T1, Nidx]``,
softmax_max/softmax_sum ``[N2, T1, G]`` (BSND ``[B, N2, S1, G]``, G = N1 / N2), softmax_max_index/softmax_sum_index
``[1, T1]`` (BSND ``[B, 1, S1]``). Each row is computed over its visible keys at once: O(S) per row, never S x S.
"""
from __future__ import annotations

import numpy as np

from ._common import f64
from .lightning_indexer import LOG_FLOOR, _prepare, _score_backward, _to_tnd, index_scores, score_backward_terms


def _index_stats_shape(layout: str, query_index: np.ndarray) -> tuple[int, ...]:
    return query_index.shape[:1] + (1,) + query_index.shape[1:2] if layout == "BSND" else (1, query_index.shape[0])


def dense_lightning_indexer_softmax_lse(query_index: np.ndarray, key_index: np.ndarray, weights: np.ndarray,
                                        actual_seq_lengths_query: object = None,
                                        actual_seq_lengths_key: object = None, cmp_residual_k: object = None, *,
                                        layout: str = "BSND", sparse_mode: int = 3, cmp_ratio: int = 1
                                        ) -> tuple[np.ndarray, np.ndarray]:
    """(max_j I_j, sum_j exp(I_j - max)) over each query row's visible keys, float64 ``[1, T1]`` (BSND
    ``[B, 1, S1]``); ``I`` is :func:`lightning_indexer`'s score. A row without a visible key gets (0, 0).
    Compressed keys: docs/contract.md section 9.1."""
    t1, rows = _prepare(layout, query_index, key_index, actual_seq_lengths_query, actual_seq_lengths_key, sparse_mode,
                        cmp_ratio, cmp_residual_k)
    qi, ki, w = _to_tnd(layout, query_index, key_index, weights)
    mx = np.zeros(t1)
    sm = np.zeros(t1)
    for t in range(t1):
        n, base = int(rows.limit[t]), int(rows.key_base[t])
        if n == 0:
            continue
        score = index_scores(qi[t], ki[base:base + n, 0], w[t])
        mx[t] = score.max()
        sm[t] = np.exp(score - mx[t]).sum()
    shape = _index_stats_shape(layout, query_index)
    return mx.reshape(shape), sm.reshape(shape)


def _logits(q: np.ndarray, k: np.ndarray, qr: np.ndarray | None, kr: np.ndarray | None, t: int, keys: np.ndarray,
            scale_value: float) -> np.ndarray:
    """``[N1, n]`` scaled logits of query row t against key rows ``keys``, head h against key head h // G."""
    heads = np.arange(q.shape[1]) // (q.shape[1] // k.shape[1])
    s = np.einsum("hd,jhd->hj", f64(q[t]), f64(k[keys][:, heads]))
    if qr is not None:
        s = s + np.einsum("hd,jhd->hj", f64(qr[t]), f64(kr[keys][:, heads]))
    return scale_value * s


def _heads(layout: str, stat: np.ndarray) -> np.ndarray:
    """Attention statistics ``[N2, T1, G]`` / ``[B, N2, S1, G]`` as ``[T1, N1]`` (head h = hk * G + g)."""
    s = f64(stat)
    if layout == "BSND":
        return s.transpose(0, 2, 1, 3).reshape(-1, s.shape[1] * s.shape[3])
    return s.transpose(1, 0, 2).reshape(s.shape[1], -1)


def dense_attention_softmax_stats(query: np.ndarray, key: np.ndarray, query_rope: np.ndarray | None = None,
                                  key_rope: np.ndarray | None = None, actual_seq_lengths_query: object = None,
                                  actual_seq_lengths_key: object = None, cmp_residual_k: object = None, *,
                                  scale_value: float, layout: str = "BSND", sparse_mode: int = 3, cmp_ratio: int = 1
                                  ) -> tuple[np.ndarray, np.ndarray]:
    """``softmax_max``/``softmax_sum`` of the dense main attention over every visible key (section 0.7):
    ``[N2, T1, G]`` (BSND ``[B, N2, S1, G]``); a row without a visible key gets (0, 0). Compressed keys:
    section 9.1."""
    t1, rows = _prepare(layout, query, key, actual_seq_lengths_query, actual_seq_lengths_key, sparse_mode, cmp_ratio,
                        cmp_residual_k)
    q, k, qr, kr = _to_tnd(layout, query, key, query_rope, key_rope)
    n1, n2 = q.shape[1], k.shape[1]
    mx = np.zeros((t1, n1))
    sm = np.zeros((t1, n1))
    for t in range(t1):
        n, base = int(rows.limit[t]), int(rows.key_base[t])
        if n == 0:
            continue
        s = _logits(q, k, qr, kr, t, np.arange(base, base + n), scale_value)
        mx[t] = s.max(axis=1)
        sm[t] = np.exp(s - mx[t][:, None]).sum(axis=1)
    g = n1 // n2
    if layout == "BSND":
        b, s1 = query.shape[:2]
        return tuple(x.reshape(b, s1, n2, g).transpose(0, 2, 1, 3) for x in (mx, sm))
    return tuple(x.reshape(t1, n2, g).transpose(1, 0, 2) for x in (mx, sm))


def dense_lightning_indexer_grad_kl_loss(
        query: np.ndarray, key: np.ndarray, query_index: np.ndarray, key_index: np.ndarray, weights: np.ndarray,
        softmax_max: np.ndarray, softmax_sum: np.ndarray, softmax_max_index: np.ndarray,
        softmax_sum_index: np.ndarray, query_rope: np.ndarray | None = None, key_rope: np.ndarray | None = None,
        actual_seq_lengths_query: object = None, actual_seq_lengths_key: object = None,
        cmp_residual_k: object = None, *, scale_value: float, layout: str = "BSND", sparse_mode: int = 3,
        cmp_ratio: int = 1, terms: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """docs/contract.md section 4.4: (d_query_index, d_key_index, d_weights, loss) for d(loss) = 1, over every
    visible key: teacher ``p`` the head mean of the attention probabilities from the given statistics,
    ``y = exp(I - softmax_max_index) / softmax_sum_index``, the loss a raw sum over rows, CANN's ``dI = y - p``.
    Compressed keys: section 9.1. ``terms=True``: each output is the sum of the absolute values of its terms
    (``|dI| <= y + p``; the loss ``sum p (|ln p| + |ln y| + 1)``, as in ``sparse_lightning_indexer_grad_kl_loss``)."""
    t1, rows = _prepare(layout, query, key, actual_seq_lengths_query, actual_seq_lengths_key, sparse_mode, cmp_ratio,
                        cmp_residual_k)
    q, k, qr, kr, qi, ki, w = _to_tnd(layout, query, key, query_rope, key_rope, query_index, key_index, weights)
    mx, sm = _heads(layout, softmax_max), _heads(layout, softmax_sum)
    mxi, smi = f64(softmax_max_index).reshape(-1), f64(softmax_sum_index).reshape(-1)
    n1 = q.shape[1]
    dqi = np.zeros(qi.shape)
    dki = np.zeros(ki.shape)
    dw = np.zeros(w.shape)
    loss = 0.0
    for t in range(t1):
        n, base = int(rows.limit[t]), int(rows.key_base[t])
        if n == 0:
            continue
        j = np.arange(base, base + n)
        p = (np.exp(_logits(q, k, qr, kr, t, j, scale_value) - mx[t][:, None]) / sm[t][:, None]).sum(axis=0) / n1
        qt, kt, wt = f64(qi[t]), f64(ki[j, 0]), f64(w[t])
        sx = qt @ kt.T
        log_y = wt @ np.maximum(sx, 0.0) - mxi[t] - np.log(smi[t])
        y = np.exp(log_y)
        log_p, log_y_floor = np.log(np.maximum(p, LOG_FLOOR)), np.maximum(log_y, np.log(LOG_FLOOR))
        loss += float(np.sum(p * (np.abs(log_p) + np.abs(log_y_floor) + 1 if terms else log_p - log_y_floor)))
        backward = score_backward_terms if terms else _score_backward
        dw[t], dqi[t], dk = backward(qt, kt, wt, sx, y + p if terms else y - p)
        dki[base:base + n, 0] += dk
    return dqi.reshape(query_index.shape), dki.reshape(key_index.shape), dw.reshape(weights.shape), loss
