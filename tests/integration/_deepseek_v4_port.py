"""DeepSeek-V4's attention layer (``inference/model.py`` of deepseek-ai/DeepSeek-V4-Flash/-Pro:
``Attention``, ``Compressor``, ``Indexer``, ``sparse_attn``) restated in float64 NumPy for a whole
sequence from position 0, without the release's FP8/FP4 quantisation simulation (inference-only) and
without its decode caches.

One layer, ``x [B, S, dim]`` -> ``[B, S, dim]``:

- query ``q = wq_b(q_norm(wq_a x))`` per head, then a weightless RMS norm per head, RoPE on the last
  ``rope_dim`` channels (interleaved pairs: channel 2i and 2i+1 rotate together);
- one key/value vector ``kv = kv_norm(wkv x)`` with the same RoPE;
- ratio r > 0: a compressor pools each complete block of r tokens (r = 4: the previous block's copy
  and the current block's, 2r positions) with a per-feature softmax over the positions of the gate
  ``wgate x + ape``; RMS norm; RoPE at the block's first position; the indexer's compressor
  Hadamard-rotates too;
- which keys a query t sees: tokens ``max(0, t-window+1) .. t``, and, by ratio, no compressed
  entry (0), every entry ``j < (t+1)//r`` (128), or the indexer's top-k of those (4):
  ``score[t, j] = sum_h w[t,h] relu(q_I[t,h] . k_I[j])`` with ``w = weights_proj x / sqrt(d_I * h_I)``;
- attention with a per-head sink logit in the denominator only, scale ``head_dim^-1/2``;
- inverse RoPE of the output's last channels, one ``wo_a`` per output group, then ``wo_b``.

RoPE frequencies: ``base^(-2i/rope_dim)``; compressed layers use ``compress_base`` with YaRN
(``factor``, ``original_seq_len``, ``beta_fast``, ``beta_slow``), the window-only layer plain RoPE.
Parameters are a dict of float64 arrays named as in DeepSeek's checkpoint (``wq_a``, ``q_norm``,
``compressor.wkv``, ``indexer.compressor.ape``, ... : ``Linear`` weights ``[out, in]``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class V4Args:
    dim: int
    n_heads: int
    head_dim: int
    rope_dim: int
    q_lora_rank: int
    o_groups: int
    o_lora_rank: int
    window: int
    index_heads: int
    index_head_dim: int
    index_topk: int
    base: float
    compress_base: float
    factor: float
    original_seq_len: int
    beta_fast: float
    beta_slow: float
    eps: float


def hadamard(n: int) -> np.ndarray:
    """The Sylvester Hadamard matrix of order ``n`` (a power of two; symmetric, entries +-1): the
    unnormalised Walsh-Hadamard transform DeepSeek's ``rotate_activation`` applies."""
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    if h.shape[0] != n:
        raise ValueError(f"hadamard: order {n} is not a power of two")
    return h


def rms_norm(x: np.ndarray, weight: np.ndarray | None, eps: float) -> np.ndarray:
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y if weight is None else y * weight


def rope_angles(args: V4Args, seqlen: int, compressed: bool) -> np.ndarray:
    """``[seqlen, rope_dim/2]`` rotation angles of positions 0 .. seqlen-1."""
    dim = args.rope_dim
    base = args.compress_base if compressed else args.base
    inv = base ** -(np.arange(0, dim, 2) / dim)
    if compressed:  # YaRN: interpolate the slow channels, keep the fast ones, ramp between
        def correction(rotations: float) -> float:
            return dim * math.log(args.original_seq_len / (rotations * 2 * math.pi)) / (2 * math.log(base))
        low = max(math.floor(correction(args.beta_fast)), 0)
        high = min(math.ceil(correction(args.beta_slow)), dim - 1)
        if low == high:
            high += 0.001
        keep = 1 - np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)
        inv = inv / args.factor * (1 - keep) + inv * keep
    return np.outer(np.arange(seqlen), inv)


def rope(x: np.ndarray, angles: np.ndarray, inverse: bool = False) -> np.ndarray:
    """The last ``2 * angles.shape[-1]`` channels of ``x [B, S, (H,) D]`` rotated pairwise by the
    angles of their position (``angles [S, rd/2]``), backwards when ``inverse``."""
    rd = 2 * angles.shape[-1]
    out = x.copy()
    pairs = x[..., -rd:].reshape(*x.shape[:-1], rd // 2, 2)
    a = angles if x.ndim == 3 else angles[:, None, :]
    cos, sin = np.cos(a), (-1 if inverse else 1) * np.sin(a)
    even, odd = pairs[..., 0], pairs[..., 1]
    out[..., -rd:] = np.stack((even * cos - odd * sin, even * sin + odd * cos), -1).reshape(*x.shape[:-1], rd)
    return out


def compress(args: V4Args, p: dict, prefix: str, x: np.ndarray, ratio: int, head_dim: int,
             rotate: bool) -> np.ndarray:
    """``[B, S // ratio, head_dim]``: every complete block of ``ratio`` tokens pooled."""
    b, s, _ = x.shape
    n = s // ratio
    kv = (x @ p[prefix + "wkv"].T)[:, :n * ratio].reshape(b, n, ratio, -1)
    score = (x @ p[prefix + "wgate"].T)[:, :n * ratio].reshape(b, n, ratio, -1) + p[prefix + "ape"]
    if ratio == 4:  # overlapping: block i pools block i-1's first-half copy and its own second half
        d = head_dim
        prev_kv = np.concatenate((np.zeros_like(kv[:, :1, :, :d]), kv[:, :-1, :, :d]), 1)
        prev_score = np.concatenate((np.full_like(score[:, :1, :, :d], -np.inf), score[:, :-1, :, :d]), 1)
        kv = np.concatenate((prev_kv, kv[..., d:]), 2)
        score = np.concatenate((prev_score, score[..., d:]), 2)
    weight = np.exp(score - score.max(2, keepdims=True))
    weight /= weight.sum(2, keepdims=True)
    pooled = rms_norm((kv * weight).sum(2), p[prefix + "norm"], args.eps)
    pooled = rope(pooled, rope_angles(args, n * ratio, True)[::ratio])
    if rotate:
        pooled = pooled @ hadamard(head_dim) / math.sqrt(head_dim)
    return pooled


def indexer_scores(args: V4Args, p: dict, x: np.ndarray, qr: np.ndarray, ratio: int) -> np.ndarray:
    """``[B, S, S // ratio]``: the indexer's score of every compressed entry (``-inf``: not yet visible)."""
    b, s, _ = x.shape
    h, d = args.index_heads, args.index_head_dim
    q = (qr @ p["indexer.wq_b"].T).reshape(b, s, h, d)
    q = rope(q, rope_angles(args, s, True)) @ hadamard(d) / math.sqrt(d)
    k = compress(args, p, "indexer.compressor.", x, ratio, d, rotate=True)
    w = (x @ p["indexer.weights_proj"].T) * (d ** -0.5 * h ** -0.5)
    score = (np.maximum(np.einsum("bshd,btd->bsht", q, k), 0) * w[..., None]).sum(2)
    visible = np.arange(k.shape[1])[None, :] < (np.arange(1, s + 1) // ratio)[:, None]
    return np.where(visible, score, -np.inf)


def indexer_picks(args: V4Args, p: dict, x: np.ndarray, qr: np.ndarray, ratio: int) -> np.ndarray:
    """``[B, S, min(topk, S // ratio)]`` compressed entries each query attends (-1: none)."""
    score = indexer_scores(args, p, x, qr, ratio)
    visible = np.isfinite(score)
    top = min(args.index_topk, score.shape[-1])
    picks = np.argsort(-score, -1, kind="stable")[..., :top]
    return np.where(np.take_along_axis(np.broadcast_to(visible, score.shape), picks, -1), picks, -1)


def attention(args: V4Args, p: dict, x: np.ndarray, ratio: int,
              target: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """(the layer's output ``[B, S, dim]``, the indexer's picks ``[B, S, K]`` or None). ``target``
    (ratio 4, ``[B, S, K]``) receives the main attention's head-mean probability of each picked entry
    (the window's keys and the sink in the denominator: CANN's ``cmp_softmax_l1_norm``; 0 for -1)."""
    b, s, _ = x.shape
    h, d = args.n_heads, args.head_dim
    angles = rope_angles(args, s, ratio > 0)
    qr = rms_norm(x @ p["wq_a"].T, p["q_norm"], args.eps)
    q = rope(rms_norm((qr @ p["wq_b"].T).reshape(b, s, h, d), None, args.eps), angles)
    kv = rope(rms_norm(x @ p["wkv"].T, p["kv_norm"], args.eps), angles)
    t = np.arange(s)
    rows = [[list(range(max(0, i - args.window + 1), i + 1)) for i in t] for _ in range(b)]
    picks = None
    if ratio:
        kv = np.concatenate((kv, compress(args, p, "compressor.", x, ratio, d, rotate=False)), 1)
        if ratio == 4:
            picks = indexer_picks(args, p, x, qr, ratio)
            extra = [[[s + j for j in picks[bi, i] if j >= 0] for i in t] for bi in range(b)]
        else:
            extra = [[[s + j for j in range((i + 1) // ratio)] for i in t] for _ in range(b)]
        rows = [[rows[bi][i] + extra[bi][i] for i in t] for bi in range(b)]
    out = np.empty((b, s, h, d))
    sink = p["attn_sink"]
    for bi in range(b):
        for i in t:
            keys = kv[bi, rows[bi][i]]
            logits = q[bi, i] @ keys.T * d ** -0.5  # [H, K]
            m = np.maximum(logits.max(-1), sink)
            e = np.exp(logits - m[:, None])
            denominator = (e.sum(-1) + np.exp(sink - m))[:, None]
            out[bi, i] = (e @ keys) / denominator
            if target is not None:
                n = len(extra[bi][i])
                target[bi, i] = 0.0
                target[bi, i, :n] = (e[:, len(e[0]) - n:] / denominator).mean(0)
    out = rope(out, angles, inverse=True).reshape(b, s, args.o_groups, -1)
    wo_a = p["wo_a"].reshape(args.o_groups, args.o_lora_rank, -1)
    return np.einsum("bsgd,grd->bsgr", out, wo_a).reshape(b, s, -1) @ p["wo_b"].T, picks


def indexer_kl_loss(args: V4Args, p: dict, x: np.ndarray, target: np.ndarray, picks: np.ndarray,
                    coeff: float) -> float:
    """mindformers' fused indexer loss as its gradients define it (ratio 4): ``coeff / (B S)`` times the
    sum over rows of ``sum_s p_s (ln p_s - ln y_s)``, ``p`` the raw ``target`` (``attention``'s, held
    fixed), ``y`` the softmax of the indexer's scores over the row's valid picks (contract 9.2)."""
    b, s, _ = x.shape
    qr = rms_norm(x @ p["wq_a"].T, p["q_norm"], args.eps)
    score = indexer_scores(args, p, x, qr, 4)
    total = 0.0
    for bi in range(b):
        for i in range(s):
            valid = picks[bi, i] >= 0
            if not valid.any():
                continue
            logits = score[bi, i, picks[bi, i, valid]]
            log_y = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
            t = target[bi, i, valid]
            total += float((t * (np.log(t) - log_y)).sum())
    return coeff * total / (b * s)
