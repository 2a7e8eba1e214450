"""Float64 reference of ``sparse_lightning_indexer_kl_loss_grad`` (docs/contract.md section 9.2): CANN's V4
indexer KL gradient against a target ``attn_softmax_l1_norm`` given per slot.

Shapes (TND; BSND adds B, S): query_index ``[T1, Nidx, Didx]``, key_index ``[T2, 1, Didx]``, weights
``[T1, Nidx]``, sparse_indices and attn_softmax_l1_norm ``[T1, 1, K]``, cmp_residual_k ``[B]``.
"""
from __future__ import annotations

import numpy as np

from ._common import f64
from .lightning_indexer import LOG_FLOOR, _prepare, _score_backward, _to_tnd, _visible_slots, score_backward_terms


def sparse_lightning_indexer_kl_loss_grad(
        query_index: np.ndarray, key_index: np.ndarray, weights: np.ndarray, sparse_indices: np.ndarray,
        attn_softmax_l1_norm: np.ndarray, actual_seq_lengths_query: object = None,
        actual_seq_lengths_key: object = None, cmp_residual_k: object = None, *, layout: str = "BSND",
        sparse_mode: int = 3, cmp_ratio: int = 1, terms: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """Returns float64 (d_query_index, d_key_index, d_weights, softmax_out, loss). Per row, over the
    valid slots s (index >= 0 and visible; ``-1`` and hidden slots are skipped and their target never
    read): ``y = softmax(I)``, ``dI_s = y_s * sum(p) - p_s`` (the exact gradient of the loss for any sum
    of p), ``loss += sum_s p_s (ln max(p_s, 1e-8) - ln max(y_s, 1e-8))``; softmax_out holds y per slot,
    0 elsewhere. An index ``< -1`` or ``>= S2_b`` raises ``IndexError``. ``terms=True``: the three gradients are
    the sums of the absolute values of their terms (:func:`score_backward_terms` with ``|dI|`` taken as
    ``y * sum(p) + p``); softmax_out and the loss are unchanged."""
    t1, rows = _prepare(layout, query_index, key_index, actual_seq_lengths_query, actual_seq_lengths_key,
                        sparse_mode, cmp_ratio, cmp_residual_k)
    qi, ki, w, si, target = _to_tnd(layout, query_index, key_index, weights, sparse_indices, attn_softmax_l1_norm)
    dqi = np.zeros(qi.shape)
    dki = np.zeros(ki.shape)
    dw = np.zeros(w.shape)
    y_out = np.zeros(si.shape)
    loss = 0.0
    for t in range(t1):
        slots, j = _visible_slots(rows, si, t)
        if j.size == 0:
            continue
        qt, kt, wt = f64(qi[t]), f64(ki[j, 0]), f64(w[t])
        sx = qt @ kt.T
        i_score = wt @ np.maximum(sx, 0.0)
        log_y = i_score - i_score.max()
        log_y = log_y - np.log(np.exp(log_y).sum())
        y = np.exp(log_y)
        p = f64(target[t]).reshape(-1)[slots]
        loss += float(np.sum(p * (np.log(np.maximum(p, LOG_FLOOR)) - np.maximum(log_y, np.log(LOG_FLOOR)))))
        y_out[t, 0, slots] = y
        d_i = y * p.sum() + p if terms else y * p.sum() - p
        dw[t], dqi[t], dk = (score_backward_terms if terms else _score_backward)(qt, kt, wt, sx, d_i)
        np.add.at(dki[:, 0], j, dk)
    return (dqi.reshape(query_index.shape), dki.reshape(key_index.shape), dw.reshape(weights.shape),
            y_out.reshape(sparse_indices.shape), loss)
