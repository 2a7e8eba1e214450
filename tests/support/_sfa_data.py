"""Random inputs for the sparse flash attention tests (TND and BSND)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Case:
    """One problem: arrays in float64 (not yet quantized) plus the attributes."""

    layout: str
    query: np.ndarray
    key: np.ndarray
    value: np.ndarray
    sparse_indices: np.ndarray
    query_rope: np.ndarray | None
    key_rope: np.ndarray | None
    lens_q: list[int] | None
    lens_kv: list[int] | None
    scale_value: float
    sparse_block_size: int
    sparse_mode: int
    extra: dict = field(default_factory=dict)

    def attrs(self) -> dict:
        return {"scale_value": self.scale_value, "sparse_block_size": self.sparse_block_size,
                "layout": self.layout, "sparse_mode": self.sparse_mode}


def _row_indices(rng: np.random.Generator, s1: int, s1_len: int, s2_len: int, k: int, bs: int, mode: int,
                 pattern: str) -> np.ndarray:
    """K block indices for one row: distinct visible blocks (some may be partly masked), -1 slots
    placed by ``pattern`` ("end", "start", "middle", "scatter"), sometimes a hidden block."""
    limit = s2_len - 1 if mode == 0 else min(s2_len - 1, s1 + s2_len - s1_len)
    row = np.full(k, -1, np.int32)
    if limit < 0:
        # Nothing visible; still select a (fully masked) block when one exists.
        if s2_len > 0:
            row[0] = rng.integers(0, -(-s2_len // bs))
        return row
    nvis_blocks = limit // bs + 1
    take = min(k, nvis_blocks, int(rng.integers(max(1, k // 2), k + 1)))
    chosen = rng.choice(nvis_blocks, size=take, replace=False).astype(np.int32)
    if pattern == "start":
        row[k - take:] = chosen
    elif pattern == "middle":
        lo = (k - take) // 2
        row[lo:lo + take] = chosen
    elif pattern == "scatter":
        pos = np.sort(rng.choice(k, size=take, replace=False))
        row[pos] = chosen
    else:
        row[:take] = chosen
    return row


def make_case(rng: np.random.Generator, *, layout: str = "TND", lens_q: list[int] | None = None,
              lens_kv: list[int] | None = None, batch: int = 2, s1: int = 5, s2: int = 9, n1: int = 4, n2: int = 1,
              d: int = 16, dr: int | None = 8, k: int = 6, bs: int = 1, mode: int = 3, pattern: str = "scatter",
              scale: float | None = None) -> Case:
    """A random case. TND uses ``lens_q``/``lens_kv`` (per-batch lengths, not cumulative)."""
    if layout == "TND":
        assert lens_q is not None and lens_kv is not None
        t1, t2 = sum(lens_q), sum(lens_kv)
        qshape, kshape = (t1, n1), (t2, n2)
        batches = list(zip(lens_q, lens_kv))
    else:
        qshape, kshape = (batch, s1, n1), (batch, s2, n2)
        batches = [(s1, s2)] * batch
    query = rng.standard_normal((*qshape, d))
    key = rng.standard_normal((*kshape, d))
    value = rng.standard_normal((*kshape, d))
    qr = rng.standard_normal((*qshape, dr)) if dr else None
    kr = rng.standard_normal((*kshape, dr)) if dr else None
    patterns = ["end", "start", "middle", "scatter"]
    rows = []
    for s1_len, s2_len in batches:
        for i in range(s1_len):
            pat = pattern if pattern != "mixed" else patterns[i % 4]
            rows.append([_row_indices(rng, i, s1_len, s2_len, k, bs, mode, pat) for _ in range(n2)])
    idx = np.asarray(rows, np.int32).reshape(*qshape[:-1], n2, k) if rows else np.zeros((*qshape[:-1], n2, k),
                                                                                           np.int32)
    cum_q = np.cumsum(lens_q).tolist() if layout == "TND" else None
    cum_kv = np.cumsum(lens_kv).tolist() if layout == "TND" else None
    return Case(layout, query, key, value, idx, qr, kr, cum_q, cum_kv,
                scale if scale is not None else 1.0 / np.sqrt(d + (dr or 0)), bs, mode)
