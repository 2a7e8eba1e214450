"""Helpers shared by the float64 references."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

ArrayLike = np.ndarray


def f64(x: np.ndarray) -> np.ndarray:
    """Return ``x`` as a float64 array (the references compute in float64)."""
    return np.asarray(x, dtype=np.float64)


def seq_positions(q_seq_len: Sequence[int] | np.ndarray) -> np.ndarray:
    """Local position of every packed token: ``[0..L0), [0..L1), ...`` concatenated (int64)."""
    lens = np.asarray(q_seq_len, dtype=np.int64).reshape(-1)
    return np.concatenate([np.arange(n, dtype=np.int64) for n in lens]) if lens.size else np.zeros(0, np.int64)
