"""Float64 references of ``rope`` and ``rope_grad`` (docs/contract.md section 1).

Shapes: q, k, q_grad, k_grad ``[n_tokens, hidden]`` with hidden = 128 * heads;
cos, sin ``[max_seq_len, 128]``; q_seq_len: per-sequence lengths (not cumulative).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._common import f64, seq_positions

HEAD = 128
HALF = HEAD // 2


def _token_tables(cos: np.ndarray, sin: np.ndarray,
                  q_seq_len: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pos = seq_positions(q_seq_len)
    return f64(cos)[pos], f64(sin)[pos]


def _heads(x: np.ndarray) -> np.ndarray:
    return f64(x).reshape(x.shape[0], -1, HEAD)


def _rope_one(x: np.ndarray, c: np.ndarray, s: np.ndarray) -> np.ndarray:
    xh = _heads(x)
    rot = np.concatenate([-xh[..., HALF:], xh[..., :HALF]], axis=-1)
    return (xh * c[:, None, :] + rot * s[:, None, :]).reshape(x.shape)


def rope(q: np.ndarray, k: np.ndarray, cos: np.ndarray, sin: np.ndarray,
         q_seq_len: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``y = x*cos + rotate_half(x)*sin`` per 128-wide head; returns (q_embed, k_embed)."""
    c, s = _token_tables(cos, sin, q_seq_len)
    return _rope_one(q, c, s), _rope_one(k, c, s)


def _vjp_one(g: np.ndarray, c: np.ndarray, s: np.ndarray) -> np.ndarray:
    gh = _heads(g)
    c, s = c[:, None, :], s[:, None, :]
    lo = gh[..., :HALF] * c[..., :HALF] + gh[..., HALF:] * s[..., HALF:]
    hi = gh[..., HALF:] * c[..., HALF:] - gh[..., :HALF] * s[..., :HALF]
    return np.concatenate([lo, hi], axis=-1).reshape(g.shape)


def _atb_one(g: np.ndarray, c: np.ndarray, s: np.ndarray) -> np.ndarray:
    w = c + np.concatenate([s[:, HALF:], -s[:, :HALF]], axis=-1)
    return (_heads(g) * w[:, None, :]).reshape(g.shape)


def rope_grad(q_grad: np.ndarray, k_grad: np.ndarray, cos: np.ndarray, sin: np.ndarray,
              q_seq_len: Sequence[int] | np.ndarray, mode: str = "atb") -> tuple[np.ndarray, np.ndarray]:
    """ATB RopeGrad (``mode="atb"``: ``g * (cos + cat(sin[64:], -sin[:64]))``) or the exact
    VJP of :func:`rope` (``mode="vjp"``); returns (q_grad_out, k_grad_out)."""
    fn = {"atb": _atb_one, "vjp": _vjp_one}[mode]
    c, s = _token_tables(cos, sin, q_seq_len)
    return fn(q_grad, c, s), fn(k_grad, c, s)
