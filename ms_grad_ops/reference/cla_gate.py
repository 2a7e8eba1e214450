"""Float64 references of ``cla_gate_merge`` and ``cla_gate_backward`` (docs/contract.md section 2).

Shapes: attention tensors ``[T, N, D]``, gate logits ``[T, N]``.
"""
from __future__ import annotations

import numpy as np

from ._common import f64


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-f64(z)))


def cla_gate_merge(global_attn: np.ndarray, local_attn: np.ndarray, global_gate_logits: np.ndarray,
                   local_gate_logits: np.ndarray) -> np.ndarray:
    """``sigmoid(z_g)[..., None] * O_g + sigmoid(z_l)[..., None] * O_l``."""
    return (_sigmoid(global_gate_logits)[..., None] * f64(global_attn)
            + _sigmoid(local_gate_logits)[..., None] * f64(local_attn))


def cla_gate_backward(grad_merged: np.ndarray, global_attn: np.ndarray, local_attn: np.ndarray,
                      global_gate_logits: np.ndarray, local_gate_logits: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Returns (dO_g, dO_l, dz_g, dz_l) of :func:`cla_gate_merge` for upstream ``grad_merged``."""
    g = f64(grad_merged)
    s_g, s_l = _sigmoid(global_gate_logits), _sigmoid(local_gate_logits)
    # s * (1 - s) as s * sigmoid(-z): 1 - s cancels for large z, even in float64 (z > 36.7 gives 0).
    dz_g = (g * f64(global_attn)).sum(-1) * s_g * _sigmoid(-f64(global_gate_logits))
    dz_l = (g * f64(local_attn)).sum(-1) * s_l * _sigmoid(-f64(local_gate_logits))
    return g * s_g[..., None], g * s_l[..., None], dz_g, dz_l
