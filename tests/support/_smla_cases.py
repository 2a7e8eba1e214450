"""Random sparse_flash_mla cases (docs/contract.md section 8), laid out as TND or BSND with CANN's lengths.

A case is given per batch (query, original and compressed lengths) and one kind: "swa" (no compressed keys),
"hca" (every visible compressed entry) or "csa" (cmp_sparse_indices: random visible entries, -1 slots at random
positions, an entry the causal rule hides and a repeated entry now and then). BSND pads each batch to the
longest length and passes seqused_*; TND with ``pad`` > 0 holds ``pad`` unused rows at the end of every
sequence of every source (cu_seqlens count them, seqused_* leave them out). Padding rows hold garbage indices
(never read).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

TENSORS = ("query", "ori_kv", "cmp_kv")
INT_INPUTS = ("ori_sparse_indices", "cmp_sparse_indices", "cu_seqlens_q", "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv",
              "seqused_q", "seqused_ori_kv", "seqused_cmp_kv", "cmp_residual_kv")


@dataclass
class SmlaCase:
    layout: str
    arrays: dict[str, np.ndarray | None]      # query, ori_kv, cmp_kv (float64 values), sinks (float32) or None
    ints: dict[str, np.ndarray | None]        # INT_INPUTS, int32 or None
    attrs: dict[str, object]
    lens: list[tuple[int, int, int]] = field(default_factory=list)  # (S1, S2, S3) used per batch
    starts: list[tuple[int, int, int]] = field(default_factory=list)  # its first (query, ori, cmp) flat rows
    rows: list[tuple[int, int, int]] = field(default_factory=list)  # the rows it holds (used + padding)

    def kwargs(self) -> dict[str, np.ndarray | None]:
        """Every optional input of the forward by name (the reference's keyword arguments)."""
        return {"cmp_kv": self.arrays["cmp_kv"], **self.ints, "sinks": self.arrays["sinks"]}


def _visible_cmp(s1: int, s2: int, s3: int, t: int, ratio: int, residual: int | None, mode: int) -> int:
    if mode == 0:
        return s3
    big_l = s2 if residual is None else s3 * ratio + residual
    return min(max(big_l - s1 + t + 1, 0) // ratio, s3)


def make_case(rng: np.random.Generator, *, layout: str, lens: list[tuple[int, int]], kind: str, n1: int = 4,
              n2: int = 1, d: int = 16, k: int = 6, ratio: int = 4, win_left: int = 5, win_right: int = 0,
              ori_mask_mode: int = 4, cmp_mask_mode: int = 3, residual: bool = True, sinks: bool = True,
              ori_k: int = 0, pad: int | None = None, scale: float | None = None) -> SmlaCase:
    """``lens``: (S1, S2) per batch; S3 = S2 // ratio (none for swa). ``ori_k`` > 0: ori_sparse_indices of that
    many slots instead of the band. ``pad``: unused rows per BSND batch (default 2) or per TND sequence of
    each source (default 0)."""
    has_cmp = kind != "swa"
    per = [(s1, s2, s2 // ratio if has_cmp else 0) for s1, s2 in lens]
    res = [s2 % ratio for _, s2 in lens] if has_cmp and residual else None
    nb = len(per)
    bsnd = layout == "BSND"
    pad = (2 if bsnd else 0) if pad is None else pad
    tnd_pad = 0 if bsnd else pad
    m1, m2, m3 = (max(x[i] for x in per) + (pad if bsnd else 0) for i in range(3))
    if bsnd:
        m3 = max(m3, 1) if has_cmp else 0
        rows = [(b * m1, b * m2, b * m3) for b in range(nb)]
        held = [(m1, m2, m3)] * nb
        shapes = [(nb, m1), (nb, m2), (nb, m3)]
    else:
        held = [(s1 + tnd_pad, s2 + tnd_pad, s3 + tnd_pad if has_cmp else 0) for s1, s2, s3 in per]
        c = np.cumsum([[0, 0, 0], *held], axis=0)
        rows = [tuple(int(v) for v in c[b]) for b in range(nb)]
        shapes = [(int(c[-1, 0]),), (int(c[-1, 1]),), (int(c[-1, 2]),)]
    if has_cmp and not bsnd and shapes[2][0] == 0:
        raise ValueError("a TND case with compressed keys needs at least one entry")
    query = rng.standard_normal((*shapes[0], n1, d))
    ori_kv = rng.standard_normal((*shapes[1], n2, d))
    cmp_kv = rng.standard_normal((*shapes[2], n2, d)) if has_cmp else None
    t1 = int(np.prod(shapes[0]))
    garbage = -7  # rows no batch owns: never read
    cmp_idx = np.full((t1, n2, k), garbage, np.int32) if kind == "csa" else None
    ori_idx = np.full((t1, n2, ori_k), garbage, np.int32) if ori_k else None
    for b, (s1, s2, s3) in enumerate(per):
        q0 = rows[b][0]
        for t in range(s1):
            limit = _visible_cmp(s1, s2, s3, t, ratio, None if res is None else res[b], cmp_mask_mode)
            for g in range(n2):
                if cmp_idx is not None:
                    cmp_idx[q0 + t, g] = _slots(rng, k, limit, s3)
                if ori_idx is not None:
                    ori_idx[q0 + t, g] = _slots(rng, ori_k, s2, s2)
    shape_idx = (lambda a: a.reshape(*shapes[0], n2, a.shape[-1])) if bsnd else (lambda a: a)
    ints: dict[str, np.ndarray | None] = dict.fromkeys(INT_INPUTS)
    ints["cmp_sparse_indices"] = None if cmp_idx is None else shape_idx(cmp_idx)
    ints["ori_sparse_indices"] = None if ori_idx is None else shape_idx(ori_idx)
    ints["cmp_residual_kv"] = None if res is None else np.asarray(res, np.int32)
    if bsnd or tnd_pad:
        ints["seqused_q"] = np.asarray([x[0] for x in per], np.int32)
        ints["seqused_ori_kv"] = np.asarray([x[1] for x in per], np.int32)
        if has_cmp:
            ints["seqused_cmp_kv"] = np.asarray([x[2] for x in per], np.int32)
    if not bsnd:
        cu = np.cumsum([[0, 0, 0], *held], axis=0).astype(np.int32)
        ints["cu_seqlens_q"], ints["cu_seqlens_ori_kv"] = cu[:, 0], cu[:, 1]
        if has_cmp:
            ints["cu_seqlens_cmp_kv"] = cu[:, 2]
    arrays = {"query": query, "ori_kv": ori_kv, "cmp_kv": cmp_kv,
              "sinks": rng.standard_normal(n1).astype(np.float32) if sinks else None}
    attrs = dict(softmax_scale=d ** -0.5 if scale is None else scale, cmp_ratio=ratio if has_cmp else 1,
                 ori_mask_mode=ori_mask_mode, cmp_mask_mode=cmp_mask_mode, ori_win_left=win_left,
                 ori_win_right=win_right, layout=layout)
    return SmlaCase(layout, arrays, ints, attrs, per, rows, held)


def _slots(rng: np.random.Generator, k: int, limit: int, n: int) -> np.ndarray:
    """One index row of k slots: up to k - 2 distinct visible entries (< limit), -1 elsewhere at random
    positions; sometimes an entry the mask hides (in [limit, n)) and a repeated one."""
    row = np.full(k, -1, np.int32)
    picks = list(rng.permutation(limit)[:max(0, min(limit, k - 2))])
    if limit < n and rng.random() < 0.5:
        picks.append(int(rng.integers(limit, n)))
    if picks and rng.random() < 0.3:
        picks.append(picks[0])
    picks = picks[:k]   # k < 3: the hidden or repeated entry may take the only slots
    row[rng.choice(k, size=len(picks), replace=False)] = picks
    return row
