"""Invariants of the pure tiling of sparse_flash_attention(_grad)
(ascendc/common/sfa_tiling_common.h) for 1, 8, 20, 24, 40 and 48 AI cores (2 AIVs each):

* every query row (t, g) belongs to exactly one AIV of the row pass, and every key row to
  exactly one AIV of the grad's key pass, so each (query row, selected block) pair is
  processed exactly once in each pass (a key block by the owner of its first key row);
* no idle AI core is launched and never more than the core count;
* rows are balanced by visible-key work: with known lengths no AIV carries more than the mean
  plus one row of the bound min(K * bs, visible keys) + 16; without, counts differ by <= 1;
* the UB plan fits the unified buffer; the workspace is exactly the per-AIV regions (each at
  least the buffers the kernels address) plus the grad's delta buffer; with sinks, the grad adds
  exactly its [T1, N1] sink terms and its [N1] d_sinks accumulator, the forward nothing;
* the kernel runs (test_ascendc_sparse_flash_attention*.py) check the rest at run time: the
  twin measures exactly the planned UB, every Matmul base block is checked against L0A/L0B/L0C
  and L1, and the workspace is registered with exactly the declared size.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from ascendc_harness import twin_lib as twin
from ascendc_harness import twin_sfa as sfa

CORE_COUNTS = (1, 8, 20, 24, 40, 48)


def problem(layout: str, *, lens_q: list[int] | None = None, lens_kv: list[int] | None = None, b: int = 1,
            s1: int = 1, s2: int = 1, n1: int = 1, n2: int = 1, d: int = 512, dr: int = 64, k: int = 1024,
            bs: int = 1, mode: int = 3, hidden: bool = False) -> sfa.SfaProblem:
    """Shapes only (zero-stride arrays): the tiling never reads tensor values."""
    def arr(*shape: int) -> np.ndarray:
        return np.broadcast_to(np.zeros(1), shape)
    if layout == "TND":
        t1, t2 = sum(lens_q), sum(lens_kv)
        q, kk, qr, kr = arr(t1, n1, d), arr(t2, n2, d), arr(t1, n1, dr), arr(t2, n2, dr)
        idx = arr(t1, n2, k)
        cq, ckv = np.cumsum(lens_q), np.cumsum(lens_kv)
    else:  # per-batch lengths (either side may be None)
        q, kk, qr, kr = arr(b, s1, n1, d), arr(b, s2, n2, d), arr(b, s1, n1, dr), arr(b, s2, n2, dr)
        idx = arr(b, s1, n2, k)
        cq, ckv = (None if x is None else np.asarray(x) for x in (lens_q, lens_kv))
    return sfa.SfaProblem("bfloat16", q, kk, kk, idx, qr if dr else None, kr if dr else None, cq, ckv,
                          dict(scale_value=0.05, sparse_block_size=bs, layout=layout, sparse_mode=mode),
                          lens_hidden=hidden)


PROBLEMS = {
    "bsnd_ascend": problem("BSND", b=2, s1=4096, s2=4096, n1=64, k=2048),
    "bsnd_bs16_mode0": problem("BSND", b=3, s1=700, s2=1100, n1=16, k=64, bs=16, mode=0),
    "tnd_uneven": problem("TND", lens_q=[1000, 3, 0, 4000, 17], lens_kv=[1500, 3, 5, 3000, 30], n1=16, k=1024),
    "tnd_s1_gt_s2": problem("TND", lens_q=[900, 50], lens_kv=[100, 2000], n1=128, k=1024, bs=64),
    "tnd_n2": problem("TND", lens_q=[333, 77], lens_kv=[333, 500], n1=8, n2=2, d=32, dr=0, k=40, bs=8),
    "one_row": problem("BSND", b=1, s1=1, s2=9, n1=1, d=16, dr=16, k=3),
    "tnd_lengths_unknown": problem("TND", lens_q=[1000, 24], lens_kv=[1500, 24], n1=32, k=1024, hidden=True),
    # BSND with per-batch lengths: padding rows (beyond S1_b) weigh only the row overhead.
    "bsnd_lengths": problem("BSND", b=4, s1=1000, s2=1500, lens_q=[1000, 0, 300, 999], lens_kv=[1500, 7, 0, 1400],
                            n1=16, k=1024),
    "bsnd_query_lengths": problem("BSND", b=2, s1=800, s2=800, lens_q=[10, 800], n1=8, n2=2, d=32, dr=0, k=64,
                                  bs=8),
}


def row_weights(p: sfa.SfaProblem) -> np.ndarray:
    """Per query row (t-major, g-minor): 16 + min(K * bs, visible keys) (the tiling's balance weight)."""
    if p.layout == "BSND":  # (S1_b, S2_b, query slots): BSND's padding rows see no key
        b, s1, s2 = p.query.shape[0], p.query.shape[1], p.key.shape[1]
        lq = [s1] * b if p.lens_q is None else list(p.lens_q)
        lk = [s2] * b if p.lens_kv is None else list(p.lens_kv)
        spans = [(x, y, s1) for x, y in zip(lq, lk)]
    else:
        spans = [(x, y, x) for x, y in zip(np.diff(p.lens_q, prepend=0), np.diff(p.lens_kv, prepend=0))]
    k, bs, n2 = p.sparse_indices.shape[-1], p.attrs["sparse_block_size"], p.key.shape[-2]
    w = []
    for s1_len, s2_len, slots in spans:
        local = np.arange(s1_len)
        causal = np.clip(local + s2_len - s1_len + 1, 0, s2_len)
        vis = np.full(s1_len, s2_len) if p.attrs["sparse_mode"] == 0 else causal
        w.append(np.repeat(16 + np.minimum(vis, k * bs), n2))
        w.append(np.full((slots - s1_len) * n2, 16))
    return np.concatenate(w) if w else np.zeros(0)


def covered_once(starts: np.ndarray, rows: int) -> bool:
    cover = np.zeros(rows + 1, np.int64)
    for lo, hi in zip(starts[:-1], starts[1:]):
        assert lo <= hi
        cover[lo] += 1
        cover[hi] -= 1
    return starts[0] == 0 and starts[-1] == rows and (np.cumsum(cover)[:rows] == 1).all()


def workspace_floor(kernel: str, s: sfa.SfaSchedule, d: int, dk: int, bs: int) -> int:
    """Bytes of the buffers one AIV addresses (each rounded to 512 B, as the tiling lays them)."""
    def a(x: int) -> int:
        return -(-x // 512) * 512
    m, cw = s.m_rows, s.chunk_cols
    total = a(m * dk * 2) + a(cw * dk * 2) + a(cw * d * 2) + a(m * cw * 4) + a(m * cw * 2) + a(m * dk * 4)
    if kernel == "grad":
        bc = -(-bs // 16) * 16
        total += a(m * d * 2) + a(m * cw * 4) + a(m * cw * 2) + a(bc * dk * 4) + a(bc * d * 4)
    return total


@pytest.mark.parametrize("cores", CORE_COUNTS)
@pytest.mark.parametrize("kernel", ["forward", "grad"])
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_sfa_tiling_invariants(name: str, kernel: str, cores: int) -> None:
    p = PROBLEMS[name]
    s = sfa.sfa_schedule(kernel, p, cores)
    n1, d = p.query.shape[-2:]
    t1 = p.query.shape[0] * (p.query.shape[1] if p.layout == "BSND" else 1)
    t2 = p.key.shape[0] * (p.key.shape[1] if p.layout == "BSND" else 1)
    n2 = p.key.shape[-2]
    dk = d + (0 if p.query_rope is None else p.query_rope.shape[-1])
    rows = t1 * n2
    assert s.used_aic == max(1, min(cores, -(-rows // 2))) and s.aiv == 2 * s.used_aic
    assert covered_once(s.row_start, rows), "every query row in exactly one AIV's range"
    assert covered_once(s.key_row_start, t2 * n2), "every key row (so every key block's first row) owned once"
    counts = np.diff(s.row_start)
    if p.lens_hidden:
        assert counts.max() - counts.min() <= 1
    else:
        w = row_weights(p)
        per_aiv = np.add.reduceat(np.append(w, 0), s.row_start[:-1])[: s.aiv] * (counts > 0)
        assert per_aiv.sum() == w.sum()
        assert per_aiv.max() <= w.sum() / s.aiv + w.max(), "an AIV carries more than mean + one row of work"
    assert 0 < s.ub_bytes <= twin.ub_bytes_of(mixed=True)
    assert s.key_chunk % 16 == 0 and 16 <= s.key_chunk <= 512
    assert s.ws_delta == s.aiv * s.aiv_ws_bytes
    delta = -(-(t1 * n1 * 4) // 512) * 512 if kernel == "grad" else 0
    assert s.workspace_bytes == s.ws_delta + delta, "workspace = per-AIV regions (+ delta) exactly"
    assert s.aiv_ws_bytes >= workspace_floor(kernel, s, d, dk, p.attrs["sparse_block_size"])
    assert s.tiling_key == twin.DTYPE_CODES["bfloat16"]


@pytest.mark.parametrize("cores", (1, 24, 48))
@pytest.mark.parametrize("kernel", ["forward", "grad"])
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_sfa_tiling_with_sinks(name: str, kernel: str, cores: int) -> None:
    # Sinks change nothing but the grad's d_sinks pieces: the schedule, chunks and regions stay.
    p = PROBLEMS[name]
    n1 = p.query.shape[-2]
    plain = sfa.sfa_schedule(kernel, p, cores)
    s = sfa.sfa_schedule(kernel, replace(p, sinks=np.zeros(n1, np.float32)), cores)
    assert np.array_equal(s.row_start, plain.row_start) and np.array_equal(s.key_row_start, plain.key_row_start)
    same = ("used_aic", "key_chunk", "row_chunk", "ub_tile_rows", "gather_rows", "chunk_cols", "m_rows",
            "aiv_ws_bytes", "ws_delta", "ws_sink")
    assert all(getattr(s, f) == getattr(plain, f) for f in same)
    if kernel == "forward":
        assert (s.ub_bytes, s.workspace_bytes, s.sink_tile_rows) == (plain.ub_bytes, plain.workspace_bytes, 0)
        return
    t1 = p.query.shape[0] * (p.query.shape[1] if p.layout == "BSND" else 1)
    assert s.ub_bytes == plain.ub_bytes + -(-n1 // 8) * 32 <= twin.ub_bytes_of(mixed=True), "+ [N1] accumulator"
    assert s.ws_sink == plain.workspace_bytes, "the sink terms follow the delta buffer"
    assert s.workspace_bytes == s.ws_sink + -(-(t1 * n1 * 4) // 512) * 512, "+ [T1, N1] float32 sink terms"
    score_tile = s.ub_tile_rows * -(-s.chunk_cols // 8) * 8 * 4
    assert 1 <= s.sink_tile_rows == min(4095, score_tile // (-(-n1 // 8) * 32)), "sink rows fill the score tile"
    assert plain.sink_tile_rows == 0


def test_balance_follows_causal_work() -> None:
    # Causal rows late in a sequence see more keys: the AIV ranges there hold fewer rows.
    s = sfa.sfa_schedule("forward", problem("BSND", b=1, s1=4096, s2=4096, n1=64, k=4096), 24)
    counts = np.diff(s.row_start)
    assert counts[0] > 2 * counts[-1], counts


@pytest.mark.parametrize("kwargs,match", [
    (dict(d=100), "multiple of 16"),
    (dict(dr=8), "multiple of 16"),
    # the attributes' Ascend limits and domains (the table's), read as the op_host reads them
    (dict(bs=65), r"attribute 'sparse_block_size' must be an integer in \[1, 64\] on Ascend, got 65"),
    (dict(mode=1), r"attribute 'sparse_mode' must be one of 0 \(no mask\), 3 \(rightDownCausal\), got 1"),
    (dict(n1=3, n2=2), "multiple of N2"),
])
def test_sfa_tiling_rejects(kwargs: dict, match: str) -> None:
    base = dict(b=1, s1=4, s2=4, n1=2, d=16, dr=16, k=2)
    with pytest.raises(twin.TilingError, match=match):
        sfa.sfa_schedule("grad", problem("BSND", **{**base, **kwargs}), 8)


@pytest.mark.parametrize("cores,match", [(0, "core count"), (65, "more than 64")])
def test_sfa_tiling_rejects_core_counts(cores: int, match: str) -> None:
    with pytest.raises(twin.TilingError, match=match):
        sfa.sfa_schedule("forward", PROBLEMS["one_row"], cores)
