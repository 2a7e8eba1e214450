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


def batches(layout: str, batch: int, s1: int, s2: int, lens_q: object, lens_kv: object
            ) -> list[tuple[int, int, int, int]]:
    """``(q_start, S1_b, kv_start, S2_b)`` per batch on the flattened token axis (docs/contract.md
    section 0.3). TND (``s1``/``s2`` = T1/T2): cumulative lengths, both None = one sequence. BSND
    (``batch`` rows of ``s1`` queries and ``s2`` keys): per-batch valid lengths, None = full rows;
    the rows beyond them are padding, in no batch."""
    if layout == "BSND":
        lq = [s1] * batch if lens_q is None else [int(x) for x in np.asarray(lens_q).reshape(-1)]
        lk = [s2] * batch if lens_kv is None else [int(x) for x in np.asarray(lens_kv).reshape(-1)]
        return [(b * s1, lq[b], b * s2, lk[b]) for b in range(batch)]
    if lens_q is None:
        return [(0, s1, 0, s2)]
    cq = [0, *[int(x) for x in np.asarray(lens_q).reshape(-1)]]
    ckv = [0, *[int(x) for x in np.asarray(lens_kv).reshape(-1)]]
    return [(cq[i], cq[i + 1] - cq[i], ckv[i], ckv[i + 1] - ckv[i]) for i in range(len(cq) - 1)]
