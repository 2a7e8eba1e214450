"""Float64 NumPy forward of one DeepSeek-V3.2 attention layer in prefill, written from DeepSeek-V3.2-Exp's
``inference/model.py`` as of its "fix indexer rope" commit (2025-11-17): ``precompute_freqs_cis``,
``apply_rotary_emb``, ``Indexer.forward`` and ``MLA.forward`` with a causal mask (their MHA prefill
branch, ``start_pos = 0``). Independent of the package: it reads DeepSeek's tensor names and follows
DeepSeek's own (non-absorbed) arithmetic, ``wkv_b`` expanding the latent into per-head ``k_nope`` and
``v``.

FP8 is replaced by what it stands for: ``act_quant``/``fp8_index`` compute ``relu(q . k)`` from
``q_fp8 * q_scale`` and ``k_fp8 * k_scale``, so the float index score is ``sum_h relu(q_h . k) *
w_h`` with ``w_h = weights_proj(x)_h * n_heads**-0.5 * head_dim**-0.5``; the FP8 round trip of the
KV cache (a precision simulation) is the identity. The Hadamard rotation of the indexer's q and k
(``rotate_activation``) is applied, as an explicit orthonormal Sylvester matrix.
"""
from __future__ import annotations

import math

import numpy as np

EPS = 1e-6


def frequencies(args: dict) -> np.ndarray:
    """``precompute_freqs_cis``'s angular frequencies ``[qk_rope_head_dim // 2]`` (YaRN when
    ``max_seq_len > original_seq_len``)."""
    d, base = args["qk_rope_head_dim"], args["rope_theta"]
    freqs = 1.0 / base ** (np.arange(0, d, 2) / d)
    if args["max_seq_len"] <= args["original_seq_len"]:
        return freqs

    def correction_dim(rotations: float) -> float:
        return d * math.log(args["original_seq_len"] / (rotations * 2 * math.pi)) / (2 * math.log(base))

    lo = max(math.floor(correction_dim(args["beta_fast"])), 0)
    hi = min(math.ceil(correction_dim(args["beta_slow"])), d - 1)
    if lo == hi:
        hi += 0.001
    smooth = 1.0 - np.clip((np.arange(d // 2) - lo) / (hi - lo), 0.0, 1.0)
    return freqs / args["rope_factor"] * (1.0 - smooth) + freqs * smooth


def rotate(x: np.ndarray, freqs: np.ndarray, interleaved: bool) -> np.ndarray:
    """``apply_rotary_emb`` on ``x [B, S, H, d]`` (positions 0..S-1) as a complex product: pairs
    ``(2i, 2i+1)`` interleaved (MLA), ``(i, i + d/2)`` otherwise (the indexer)."""
    s, d = x.shape[1], x.shape[-1]
    if interleaved:
        z = x[..., 0::2] + 1j * x[..., 1::2]
    else:
        z = x[..., :d // 2] + 1j * x[..., d // 2:]
    z = z * np.exp(1j * np.arange(s)[:, None] * freqs[None, :])[None, :, None, :]
    if interleaved:
        return np.stack((z.real, z.imag), -1).reshape(x.shape)
    return np.concatenate((z.real, z.imag), -1)


def hadamard(n: int) -> np.ndarray:
    """Orthonormal Sylvester Hadamard matrix (``hadamard_transform(x, scale=n**-0.5)``); n a power of 2."""
    assert n & (n - 1) == 0, "the Hadamard rotation needs a power-of-2 index_head_dim"
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / math.sqrt(n)


def _rms(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * w


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + EPS) * w + b


def softmax_scale(args: dict) -> float:
    scale = (args["qk_nope_head_dim"] + args["qk_rope_head_dim"]) ** -0.5
    if args["max_seq_len"] > args["original_seq_len"]:
        m = 0.1 * args["mscale"] * math.log(args["rope_factor"]) + 1.0
        scale *= m * m
    return scale


def index_scores(w: dict, x: np.ndarray, qr: np.ndarray, args: dict, freqs: np.ndarray,
                 interleaved: bool = False) -> np.ndarray:
    """The indexer's float64 scores ``[B, S, S]`` (future keys included, unmasked)."""
    b, s, _ = x.shape
    nh, hd, r = args["index_n_heads"], args["index_head_dim"], args["qk_rope_head_dim"]
    q = (qr @ w["indexer.wq_b.weight"].T).reshape(b, s, nh, hd)
    q = np.concatenate((rotate(q[..., :r], freqs, interleaved), q[..., r:]), -1)
    k = _layer_norm(x @ w["indexer.wk.weight"].T, w["indexer.k_norm.weight"], w["indexer.k_norm.bias"])
    k = np.concatenate((rotate(k[:, :, None, :r], freqs, interleaved)[:, :, 0], k[..., r:]), -1)
    had = hadamard(hd)
    q, k = q @ had.T, k @ had.T
    weights = (x @ w["indexer.weights_proj.weight"].T) * nh ** -0.5 * hd ** -0.5
    logits = np.maximum(np.einsum("bshd,btd->bsht", q, k), 0.0)
    return np.einsum("bsht,bsh->bst", logits, weights)


def forward(w: dict[str, np.ndarray], x: np.ndarray, args: dict, selected: np.ndarray | None = None,
            indexer_interleaved: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(out [B, S, dim], visible [B, S, S] bool, index scores [B, S, S])`` for ``x [B, S, dim]``.

    ``visible`` is DeepSeek's attention mask: the top ``min(index_topk, S)`` of each row's index scores
    (future keys at -inf) that are at or before the query. ``selected`` (bool ``[B, S, S]``) replaces
    that selection (to score a tie broken the other way); ``indexer_interleaved`` rotates the
    indexer interleaved, as DeepSeek's code did before the fix.
    """
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    x = np.asarray(x, np.float64)
    b, s, _ = x.shape
    h, nope, r, v_dim = args["n_heads"], args["qk_nope_head_dim"], args["qk_rope_head_dim"], args["v_head_dim"]
    c = args["kv_lora_rank"]
    freqs = frequencies(args)

    qr = _rms(x @ w["wq_a.weight"].T, w["q_norm.weight"])
    q = (qr @ w["wq_b.weight"].T).reshape(b, s, h, nope + r)
    q = np.concatenate((q[..., :nope], rotate(q[..., nope:], freqs, True)), -1)
    kv = x @ w["wkv_a.weight"].T
    latent = _rms(kv[..., :c], w["kv_norm.weight"])
    k_pe = rotate(kv[:, :, None, c:], freqs, True)
    kv_heads = (latent @ w["wkv_b.weight"].T).reshape(b, s, h, nope + v_dim)
    k = np.concatenate((kv_heads[..., :nope], np.broadcast_to(k_pe, (b, s, h, r))), -1)
    v = kv_heads[..., nope:]
    scores = np.einsum("bshd,bthd->bsht", q, k) * softmax_scale(args)

    causal = np.tril(np.ones((s, s), bool))
    index = index_scores(w, x, qr, args, freqs, indexer_interleaved)
    if selected is None:
        masked = np.where(causal, index, -np.inf)
        top = np.argsort(-masked, -1, kind="stable")[..., :min(args["index_topk"], s)]
        selected = np.zeros((b, s, s), bool)
        np.put_along_axis(selected, top, True, -1)
    visible = selected & causal
    scores = np.where(visible[:, :, None, :], scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    o = np.einsum("bsht,bthd->bshd", probs, v)
    return o.reshape(b, s, h * v_dim) @ w["wo.weight"].T, visible, index
