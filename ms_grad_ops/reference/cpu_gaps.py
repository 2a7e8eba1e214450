"""Float64 references of the MindSpore ops ``ms_grad_ops.cpu_gaps`` supplies on CPU, with
MindSpore's semantics (shapes, attributes, tie order), each forward with its VJP (``*_vjp(...,
dy)``: the gradient of ``sum(forward * dy)`` with respect to the differentiable inputs).

Data-movement ops return the selected values unchanged (so a test can demand equality); the
integer outputs (indices) have no gradient.
"""
from __future__ import annotations

import numpy as np

from ._common import f64


def rms_norm(x: np.ndarray, gamma: np.ndarray, epsilon: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """(y, rstd): the mean of squares over the last ``gamma.ndim`` axes."""
    x, gamma = f64(x), f64(gamma)
    axes = tuple(range(x.ndim - gamma.ndim, x.ndim))
    rstd = 1.0 / np.sqrt((x * x).mean(axes, keepdims=True) + epsilon)
    return x * rstd * gamma, rstd


def rms_norm_vjp(x: np.ndarray, gamma: np.ndarray, dy: np.ndarray, epsilon: float = 1e-6
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(dx, dgamma) of ``sum(y * dy)``."""
    x, gamma, dy = f64(x), f64(gamma), f64(dy)
    axes = tuple(range(x.ndim - gamma.ndim, x.ndim))
    n = np.prod([x.shape[a] for a in axes])
    _, rstd = rms_norm(x, gamma, epsilon)
    g = dy * gamma
    dx = rstd * g - x * rstd**3 * (g * x).sum(axes, keepdims=True) / n
    dgamma = (dy * x * rstd).reshape(-1, *gamma.shape).sum(0)
    return dx, dgamma


def batch_matmul(x: np.ndarray, y: np.ndarray, transpose_a: bool = False, transpose_b: bool = False) -> np.ndarray:
    """``x @ y`` with NumPy batch broadcasting."""
    a = np.swapaxes(f64(x), -1, -2) if transpose_a else f64(x)
    b = np.swapaxes(f64(y), -1, -2) if transpose_b else f64(y)
    return a @ b


def _unbroadcast(g: np.ndarray, shape: tuple) -> np.ndarray:
    g = g.sum(tuple(range(g.ndim - len(shape))))
    return g.sum(tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1), keepdims=True)


def batch_matmul_vjp(x: np.ndarray, y: np.ndarray, dy: np.ndarray, transpose_a: bool = False,
                     transpose_b: bool = False) -> tuple[np.ndarray, np.ndarray]:
    a = np.swapaxes(f64(x), -1, -2) if transpose_a else f64(x)
    b = np.swapaxes(f64(y), -1, -2) if transpose_b else f64(y)
    da, db = f64(dy) @ np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2) @ f64(dy)
    da = np.swapaxes(da, -1, -2) if transpose_a else da
    db = np.swapaxes(db, -1, -2) if transpose_b else db
    return _unbroadcast(da, np.shape(x)), _unbroadcast(db, np.shape(y))


def grouped_matmul(x: np.ndarray, weight: np.ndarray, group_list: np.ndarray, bias: np.ndarray | None = None,
                   transpose_b: bool = False) -> np.ndarray:
    """split_item=3, group_type=0: rows ``[group_list[e-1], group_list[e])`` times ``weight[e]``
    (``+ bias[e]``); rows past ``group_list[-1]`` are zero."""
    x, w = f64(x), f64(weight)
    w = np.swapaxes(w, -1, -2) if transpose_b else w
    out = np.zeros((x.shape[0], w.shape[2]))
    start = 0
    for e, end in enumerate(np.asarray(group_list, np.int64)):
        out[start:end] = x[start:end] @ w[e] + (0.0 if bias is None else f64(bias)[e])
        start = end
    return out


def grouped_matmul_vjp(x: np.ndarray, weight: np.ndarray, group_list: np.ndarray, dy: np.ndarray,
                       transpose_b: bool = False) -> tuple[np.ndarray, np.ndarray]:
    x, w, dy = f64(x), f64(weight), f64(dy)
    wk = np.swapaxes(w, -1, -2) if transpose_b else w
    dx, dw = np.zeros_like(x), np.zeros_like(wk)
    start = 0
    for e, end in enumerate(np.asarray(group_list, np.int64)):
        dx[start:end] = dy[start:end] @ wk[e].T
        dw[e] = x[start:end].T @ dy[start:end]
        start = end
    return dx, (np.swapaxes(dw, -1, -2) if transpose_b else dw)


def slice_ext(x: np.ndarray, dim: int, start: int, end: int, step: int) -> np.ndarray:
    """MindSpore's SliceExt: Python-style negative bounds, clamped; ``end < start`` is empty."""
    x = np.asarray(x)
    size = x.shape[dim]
    start = min(max(start + size if start < 0 else start, 0), size)
    end = min(max(end + size if end < 0 else end, start), size)
    index = [slice(None)] * x.ndim
    index[dim] = slice(start, end, step)
    return x[tuple(index)]


def slice_ext_vjp(shape: tuple, dim: int, start: int, end: int, step: int, dy: np.ndarray) -> np.ndarray:
    dx = np.zeros(shape)
    dx_view = slice_ext(dx, dim, start, end, step)
    dx_view[...] = f64(dy)  # a view of dx
    return dx


def index_select_vjp(shape: tuple, dim: int, index: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """Gradient of ``np.take(x, index, dim)``: ``dy`` summed into the selected slices."""
    dx = np.zeros(shape)
    dyd = np.moveaxis(f64(dy), dim, 0)
    dxd = np.moveaxis(dx, dim, 0)  # a view
    np.add.at(dxd, np.asarray(index, np.int64), dyd)
    return dx


def embedding_dense_backward(dy: np.ndarray, indices: np.ndarray, num_weights: int, padding_idx: int | None = None,
                             scale_grad_by_freq: bool = False) -> np.ndarray:
    """MindSpore's EmbeddingDenseBackward: ``dy [*indices.shape, H]`` summed into rows ``indices``;
    row ``padding_idx`` gets nothing; ``scale_grad_by_freq`` divides each contribution by its
    index's count in ``indices``."""
    flat = np.asarray(indices, np.int64).reshape(-1)
    g = f64(dy).reshape(flat.size, -1)
    if scale_grad_by_freq:
        g = g / np.bincount(flat, minlength=num_weights)[flat][:, None]
    dw = np.zeros((num_weights, g.shape[1]))
    np.add.at(dw, flat, g)
    if padding_idx is not None:
        dw[padding_idx % num_weights] = 0.0
    return dw


def topk(x: np.ndarray, k: int, dim: int = -1, largest: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Values and int64 indices of the k largest (smallest) along ``dim``, sorted; ties: lower
    index first."""
    order = sort(x, dim, descending=largest)[1]
    index = np.take(order, np.arange(k), axis=dim)
    return np.take_along_axis(np.asarray(x), index, dim), index


def sort(x: np.ndarray, dim: int = -1, descending: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Stable sort along ``dim`` (equal values in ascending index order), int64 indices."""
    x = np.asarray(x)
    key = x.astype(np.float64) if x.dtype.kind in "fb" else x.astype(np.int64)
    order = np.argsort(-key if descending else key, axis=dim, kind="stable").astype(np.int64)
    return np.take_along_axis(x, order, dim), order


def take_along_vjp(shape: tuple, index: np.ndarray, dim: int, dy: np.ndarray) -> np.ndarray:
    """Gradient of ``take_along_axis(x, index, dim)`` (sort / topk values)."""
    dx = np.zeros(shape)
    dxd, idx, dyd = np.moveaxis(dx, dim, -1), np.moveaxis(index, dim, -1), np.moveaxis(f64(dy), dim, -1)
    for pos in np.ndindex(idx.shape[:-1]):
        np.add.at(dxd[pos], idx[pos], dyd[pos])
    return dx


def cumsum(x: np.ndarray, dim: int) -> np.ndarray:
    return np.cumsum(f64(x), axis=dim)


def cumsum_vjp(dy: np.ndarray, dim: int) -> np.ndarray:
    return np.flip(np.cumsum(np.flip(f64(dy), dim), axis=dim), dim)


def swiglu(x: np.ndarray, dim: int = -1) -> np.ndarray:
    a, b = np.split(f64(x), 2, axis=dim)
    return a / (1.0 + np.exp(-a)) * b


def swiglu_vjp(x: np.ndarray, dy: np.ndarray, dim: int = -1) -> np.ndarray:
    a, b = np.split(f64(x), 2, axis=dim)
    s = 1.0 / (1.0 + np.exp(-a))
    dy = f64(dy)
    return np.concatenate([dy * b * s * (1.0 + a * (1.0 - s)), dy * a * s], axis=dim)


def fmod(x: np.ndarray, other: float) -> np.ndarray:
    """C's fmod: the remainder with the sign of ``x``."""
    return np.fmod(np.asarray(x), other)


def moe_token_permute(tokens: np.ndarray, indices: np.ndarray, num_out_tokens: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """(permuted_tokens, sorted_indices): slots ``s = t * topk + j`` stably sorted by expert
    ``indices[t, j]``; row r of the output holds the token of the r-th slot; ``sorted_indices[s]``
    (int32) is the row slot s went to; ``num_out_tokens`` (0/None: all) keeps a prefix, a negative
    one counts from the end."""
    flat = np.asarray(indices, np.int64).reshape(-1)
    topk = 1 if np.ndim(indices) == 1 else np.shape(indices)[1]
    order = np.argsort(flat, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    kept = order.size if not num_out_tokens else num_out_tokens
    return np.asarray(tokens)[order[:kept] // topk], rank.astype(np.int32)


def moe_token_permute_vjp(tokens_shape: tuple, indices: np.ndarray, dy: np.ndarray,
                          num_out_tokens: int | None = None) -> np.ndarray:
    flat = np.asarray(indices, np.int64).reshape(-1)
    topk = 1 if np.ndim(indices) == 1 else np.shape(indices)[1]
    order = np.argsort(flat, kind="stable")
    kept = order.size if not num_out_tokens else num_out_tokens
    dx = np.zeros(tokens_shape)
    np.add.at(dx, order[:kept] // topk, f64(dy))
    return dx


def moe_token_unpermute(permuted: np.ndarray, sorted_indices: np.ndarray, probs: np.ndarray | None = None
                        ) -> np.ndarray:
    """``out[t] = sum_j probs[t, j] * permuted[sorted_indices[t * topk + j]]``; indices past the
    permuted rows (dropped slots) add nothing."""
    permuted, s = f64(permuted), np.asarray(sorted_indices, np.int64)
    topk = 1 if probs is None else np.shape(probs)[1]
    rows = np.where((s < permuted.shape[0])[:, None], permuted[np.minimum(s, permuted.shape[0] - 1)], 0.0)
    rows = rows.reshape(-1, topk, permuted.shape[1])
    if probs is not None:
        rows = rows * f64(probs)[..., None]
    return rows.sum(1)


def moe_token_unpermute_vjp(permuted: np.ndarray, sorted_indices: np.ndarray, probs: np.ndarray | None,
                            dy: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(d_permuted, d_probs)."""
    permuted, s, dy = f64(permuted), np.asarray(sorted_indices, np.int64), f64(dy)
    topk = 1 if probs is None else np.shape(probs)[1]
    weights = np.ones((dy.shape[0], topk)) if probs is None else f64(probs)
    contrib = (weights[..., None] * dy[:, None, :]).reshape(-1, dy.shape[1])
    d_permuted = np.zeros_like(permuted)
    keep = s < permuted.shape[0]
    np.add.at(d_permuted, s[keep], contrib[keep])
    if probs is None:
        return d_permuted, None
    rows = np.where(keep[:, None], permuted[np.minimum(s, permuted.shape[0] - 1)], 0.0).reshape(-1, topk, dy.shape[1])
    return d_permuted, (rows * dy[:, None, :]).sum(-1)
